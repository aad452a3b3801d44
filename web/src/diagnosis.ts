// The bottleneck verdict of a host over the view's range (crates/diagnose,
// /api/v1/diagnosis): a strip of windows coloured by verdict; hover for
// the verdict, click for the numbers that decided it. Refreshed every 5 s
// while following live.

import { timeAxis } from './axes';
import { getJson } from './api';
import { app, rangeOf, refresh, stats } from './state';

interface Evidence { name: string; value: number; threshold: number | null }
interface Window { t: number; verdict: string; confidence: number; evidence: Evidence[]; no_data?: string[] }

export const COLOURS: Record<string, string> = {
  healthy: '#59a14f', 'cpu-busy-user': '#4e79a7', 'cpu-busy-kernel': '#f28e2b', 'io-bound': '#b07aa1',
  'lock-contention': '#e15759', 'memory-pressure': '#9c755f', 'network-bound': '#76b7b2', unknown: '#bab0ac',
};

const num = (v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3));

function evidenceTable(w: Window): string {
  return `<table class="agents evidence"><caption>${w.verdict} at ${new Date(w.t * 1000).toLocaleTimeString()} · confidence ${(w.confidence * 100).toFixed(0)} %</caption>
    <tr><th>evidence</th><th>value</th><th>threshold</th></tr>
    ${w.evidence.map((e) => `<tr><td class="sym">${e.name}</td><td>${num(e.value)}</td><td>${e.threshold === null ? '' : num(e.threshold)}</td></tr>`).join('')}</table>`;
}

interface TopRow { rank: number; symbol: string; module: string; samples: number; share: number }

/// The symbols on top of the CPUs in a window (the sampler's, when it runs
/// on the host): what the CPU-busy and lock verdicts point at.
async function topIn(host: string, from: number, to: number, gen: number): Promise<void> {
  let r: { samples: number; rows: TopRow[] };
  try { r = await getJson(`/api/v1/profile/top?host=${encodeURIComponent(host)}&from=${from}&to=${to}&n=8`); } catch { return; }
  const el = document.querySelector<HTMLElement>('#evidence');
  if (gen !== app.generation || !el || r.samples === 0) return;
  el.insertAdjacentHTML('beforeend', `<table class="agents evidence"><caption>on the CPUs in this window · ${r.samples.toLocaleString()} samples</caption>
    <tr><th>#</th><th>symbol</th><th>module</th><th>samples</th><th>share</th></tr>
    ${r.rows.map((x) => `<tr><td>${x.rank}</td><td class="sym">${x.symbol}</td><td>${x.module}</td><td>${x.samples.toLocaleString()}</td><td>${x.share.toFixed(1)} %</td></tr>`).join('')}</table>`);
}

export function verdictStrip(host: string, gen: number): void {
  let picked: number | null = null;
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    const window = Math.max(10, Math.ceil((hi - lo) / 120 / 10) * 10);
    let r: { windows: Window[] };
    try { r = await getJson(`/api/v1/diagnosis?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&window=${window}s`); } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#verdicts');
    if (!el) return;
    const shown = r.windows.filter((w) => w.verdict !== 'unknown');
    stats.verdicts = shown.length;
    if (shown.length === 0) { el.replaceChildren(); return; }
    const last = shown[shown.length - 1];
    el.innerHTML = `<div class="heat-title">Verdict <small>(every ${window} s; click a window for its evidence)</small>: <b style="color:${COLOURS[last.verdict]}">${last.verdict}</b></div>
      ${last.no_data?.length ? `<div class="no-data" title="the verdict was made without these">no data: ${last.no_data.join(', ')}</div>` : ''}
      <div class="strip">${r.windows.map((w, i) => `<span data-i="${i}" class="${picked === i ? 'on' : ''}" style="background:${COLOURS[w.verdict] ?? '#bab0ac'};opacity:${0.35 + 0.65 * w.confidence}"
        title="${w.verdict} (${(w.confidence * 100).toFixed(0)} %) at ${new Date(w.t * 1000).toLocaleTimeString()}"></span>`).join('')}</div>
      ${timeAxis(r.windows[0].t - window, r.windows[r.windows.length - 1].t, el.clientWidth)}
      <div class="legend">${Object.entries(COLOURS).map(([k, c]) => `<span><i style="background:${c}"></i>${k}</span>`).join('')}</div>
      <div id="evidence">${picked !== null && r.windows[picked] ? evidenceTable(r.windows[picked]) : ''}</div>`;
    el.querySelectorAll<HTMLElement>('.strip span').forEach((s) => s.onclick = () => { picked = +s.dataset.i!; draw(); });
    if (picked !== null && r.windows[picked]) topIn(host, r.windows[picked].t - window, r.windows[picked].t, gen);
  };
  refresh(draw, 5000);
}
