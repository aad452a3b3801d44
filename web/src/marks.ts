// What was lost, marked where it was lost: every interval in which a
// collector round was missed or dropped, the agent's spool dropped
// samples, or the per-CPU sampler lost samples is a red tick at the top of
// each line chart of that host, and every interval in which an SNMP target
// was silent or answered stale values (unchanged since its agent last
// updated them) a dot on that target's heat-map cell — each with its reason
// on hover. Read from the counters the parts store about themselves (by
// PromQL, their growth per step); refreshed every 5 s (only the steps since
// the last answer) and with each view.

import type uPlot from 'uplot';
import { getJson } from './api';
import { app, rangeOf, stats, stepFor } from './state';
import { Steps, escHtml } from './transform';

/// One interval in which something was lost: its end (s), whose, and why.
export interface Mark { t: number; host?: string; target?: string; why: string }

interface Matrix { data: { result: { metric: Record<string, string>; values: [number, string][] }[] } }

/// The counters of loss, each with its reason in words for `n` lost.
/// A counter's growth over each step: its value less its value a step
/// before (exact, and none counted twice; `increase` needs two samples in
/// a window, and a step of the sampling interval holds one).
const growth = (m: string, step: string) => `(${m} - ${m} offset ${step}) > 0`;

/// A host's losses (`{host}` in the selector) draw on its charts; SNMP
/// targets' on the cluster view's heat maps.
type Scope = 'host' | 'target';

const DROPS: { scope: Scope; expr: (window: string, step: string) => string; why: (n: number) => string }[] = [
  { scope: 'host', expr: (_, step) => growth('kansoku_collector_missed_rounds_total{HOST}', step),
    why: (n) => `${n} collector round(s) missed: a round overran its interval or the machine stalled` },
  { scope: 'host', expr: (_, step) => growth('kansoku_collector_dropped_batches_total{HOST}', step),
    why: (n) => `${n} round(s) dropped: the store's queue was full` },
  { scope: 'host', expr: (_, step) => growth('kansoku_agent_spool_dropped_samples_total{HOST}', step),
    why: (n) => `${n} sample(s) dropped by the agent: its spool was full` },
  { scope: 'host', expr: (_, step) => growth('kansoku_perf_lost_samples_total{HOST}', step),
    why: (n) => `${n} per-CPU sample(s) lost by the kernel: a ring buffer overflowed` },
  { scope: 'host', expr: (_, step) => growth('kansoku_perf_dropped_samples_total{HOST}', step),
    why: (n) => `${n} per-CPU sample(s) dropped: the event queue was full` },
  // Answers are 1, silences 0: the samples less their sum are the silences.
  { scope: 'target', expr: (s) => `(count_over_time(kansoku_snmp_up[${s}]) - sum_over_time(kansoku_snmp_up[${s}])) > 0`,
    why: (n) => `silent: no answer in ${n} interval(s)` },
  { scope: 'target', expr: (s) => `sum_over_time(kansoku_snmp_stale_values[${s}]) > 0`,
    why: (n) => `${n} stale value(s): unchanged since the agent last updated them` },
];

/// Each kind of loss's steps already answered: a refresh asks only for
/// the steps since (and the last 10 s again).
const kept = new Map<number, Steps>();

/// The marks of the view's range, one query per kind of loss.
export async function pollMarks(): Promise<void> {
  const [lo, hi] = rangeOf(app.view);
  const step = Math.max(stepFor(lo, hi), 1);
  const out: Mark[] = [];
  const host = app.view.view === 'host' ? app.view.host : undefined;
  const scope: Scope | undefined = host ? 'host' : app.view.view === 'cluster' ? 'target' : undefined;
  const sel = host ? `{host="${host.replace(/["\\]/g, (c) => `\\${c}`)}"}` : '';
  await Promise.all(DROPS.map(async (d, i) => {
    if (d.scope !== scope) return;
    // A window of one step less a millisecond: ranges hold both their
    // ends, and a sample on a step's boundary must count in one step only.
    const window = `${Math.round(step * 1000) - 1}ms`;
    const query = d.expr(window, `${Math.round(step * 1000)}ms`).replaceAll('{HOST}', sel);
    let steps = kept.get(i);
    if (steps?.query !== query || steps.step !== step) kept.set(i, (steps = new Steps(query, step)));
    const [from, to] = steps.want(lo, hi);
    const q = new URLSearchParams({ query, start: `${from}`, end: `${to}`, step: `${step}` });
    let r: Matrix;
    try { r = await getJson<Matrix>(`/prometheus/api/v1/query_range?${q}`); } catch { return; }
    if (kept.get(i) !== steps) return;
    for (const s of steps.add(r.data.result, from, lo)) {
      for (const [t, v] of s.values) {
        const n = Math.round(Number(v));
        if (n > 0) out.push({ t, host: s.metric.host, target: s.metric.target, why: d.why(n) });
      }
    }
  }));
  out.sort((a, b) => a.t - b.t);
  app.dropMarks = out;
  byTarget.clear();
  for (const m of out) if (m.target) (byTarget.get(m.target) ?? byTarget.set(m.target, []).get(m.target)!).push(m);
  stats.markReasons = [...new Set(out.map((m) => m.why.replace(/^\d+ /, '')))];
}

const when = (t: number) => new Date(t * 1000).toLocaleTimeString();

/// uPlot hook: a tick per mark of the view's host over the plot, its reason
/// as the tick's title (hover).
export function drawMarks(u: uPlot): void {
  const host = app.view.view === 'host' ? app.view.host : undefined;
  let layer = u.over.querySelector<HTMLElement>('.drops');
  if (!layer) {
    layer = document.createElement('div');
    layer.className = 'drops';
    u.over.appendChild(layer);
  }
  const width = u.over.clientWidth;
  const ticks: string[] = [];
  for (const m of app.dropMarks) {
    if (!host || m.host !== host || m.target) continue;
    const x = u.valToPos(m.t, 'x');
    if (!(x >= 0 && x <= width)) continue;
    ticks.push(`<i class="drop" style="left:${x.toFixed(1)}px" title="${escHtml(`${when(m.t)}: ${m.why}`)}"></i>`);
  }
  layer.innerHTML = ticks.join('');
  stats.marksDrawn += ticks.length;
}

/// The marks of each SNMP target, in time order (heat maps ask per row
/// on every redraw: a lookup, not a scan of every mark).
const byTarget = new Map<string, Mark[]>();

/// The marks of SNMP target `target` (a heat map's row) in the buckets of
/// `times` (ascending): bucket index -> reasons.
export function targetMarks(target: string, times: number[]): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const m of byTarget.get(target) ?? []) {
    // The last bucket starting at or before the mark.
    let lo = 0, hi = times.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (times[mid] <= m.t) lo = mid + 1; else hi = mid; }
    const k = Math.max(lo - 1, 0);
    if (times.length === 0) continue;
    const list = out.get(k) ?? [];
    list.push(`${when(m.t)}: ${m.why}`);
    out.set(k, list);
  }
  return out;
}
