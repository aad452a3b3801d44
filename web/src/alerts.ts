// Alerts of the rule groups (`kansoku up --rules`): a banner of the firing
// and pending ones under the header, refreshed every 5 s, and the spans
// during which an alert fired shaded on every line chart of the view (an
// alert with a `host` label only on that host's charts).

import type uPlot from 'uplot';
import { getJson } from './api';
import { $, app, rangeOf, stats, stepFor } from './state';
import { Steps, escHtml } from './transform';

export interface ActiveAlert {
  labels: Record<string, string>; annotations: Record<string, string>;
  state: 'firing' | 'pending'; activeAt: string; value: string;
}

/// A span (seconds) during which an alert fired.
export interface Band { from: number; to: number; name: string; host?: string }

interface Matrix { data: { result: { metric: Record<string, string>; values: [number, string][] }[] } }


function banner(alerts: ActiveAlert[]): void {
  const el = $('#alerts');
  if (!el) return;
  stats.alertsShown = alerts.length;
  el.hidden = alerts.length === 0;
  const firing = alerts.filter((a) => a.state === 'firing').length;
  const label = (a: ActiveAlert) => Object.entries(a.labels).filter(([k]) => k !== 'alertname')
    .map(([k, v]) => `${k}=${v}`).join(', ');
  el.className = firing ? 'firing' : 'pending';
  el.innerHTML = `<b>${firing} firing, ${alerts.length - firing} pending</b>` + alerts.map((a) =>
    `<span class="alert ${a.state}" title="${escHtml(label(a))}\nactive since ${escHtml(a.activeAt)}\nvalue ${escHtml(a.value)}">` +
    `${escHtml(a.labels.alertname ?? '?')}${a.labels.host ? ` @ ${escHtml(a.labels.host)}` : ''}` +
    `${a.annotations.summary ? `: ${escHtml(a.annotations.summary)}` : ''}</span>`).join('');
}

let firing: Steps | null = null; // the steps already answered

/// Firing spans in the view's range, from the ALERTS series (only the steps
/// since the last answer asked for): consecutive points closer than two
/// steps make one span.
async function bands(): Promise<Band[]> {
  const [lo, hi] = rangeOf(app.view);
  const step = Math.max(stepFor(lo, hi), 1);
  if (firing?.step !== step) firing = new Steps('ALERTS{alertstate="firing"}', step);
  const steps = firing;
  const [from, to] = steps.want(lo, hi);
  const q = new URLSearchParams({ query: steps.query, start: `${from}`, end: `${to}`, step: `${step}` });
  const r = await getJson<Matrix>(`/prometheus/api/v1/query_range?${q}`);
  const out: Band[] = [];
  for (const s of steps.add(r.data.result, from, lo)) {
    let cur: Band | null = null;
    for (const [t] of s.values) {
      if (cur && t - cur.to <= 2 * step) { cur.to = t; continue; }
      cur = { from: t, to: t, name: s.metric.alertname ?? '?', host: s.metric.host };
      out.push(cur);
    }
  }
  return out;
}

export async function pollAlerts(): Promise<void> {
  try {
    banner((await getJson<{ data: { alerts: ActiveAlert[] } }>('/api/v1/alerts')).data.alerts);
    app.alertBands = await bands();
  } catch { /* the health badge tells of an unreachable server */ }
}

/// uPlot hook: shades the firing spans behind the series.
export function drawBands(u: uPlot): void {
  const host = app.view.view === 'host' ? app.view.host : undefined;
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = 'rgba(225, 87, 89, 0.16)';
  for (const b of app.alertBands) {
    if (host && b.host && b.host !== host) continue;
    const x0 = Math.max(u.valToPos(b.from, 'x', true), u.bbox.left);
    const x1 = Math.min(u.valToPos(b.to, 'x', true), u.bbox.left + u.bbox.width);
    if (x1 < u.bbox.left || x0 > u.bbox.left + u.bbox.width) continue;
    ctx.fillRect(x0, u.bbox.top, Math.max(x1 - x0, 2), u.bbox.height);
    stats.bandsDrawn++;
  }
  ctx.restore();
}
