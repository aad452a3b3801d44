// Latency heat maps over time (Brendan Gregg's): for one of the kernel's
// histograms (crates/trace) of a host, each column a time step, each row a
// latency bucket, the colour how many events a second fell in it (log
// scale). Read with PromQL — sum by (le) (rate(M_bucket[step])) — from
// /prometheus, and turned from cumulative buckets into per-bucket rates.
// Refreshed every 5 s while following live, asking only for the steps
// since the last answer.

import { getJson } from './api';
import { colourScale, timeAxis, valueAxis } from './axes';
import { dur } from './kernel';
import { $, app, rangeOf, refresh, stats } from './state';
import { Grid, Series, Steps, fmt, heat, latencyGrid } from './transform';

/// The histograms offered, by their metric's name.
export const LATENCIES: [string, string][] = [
  ['kernel_syscall_seconds', 'system calls'],
  ['kernel_futex_wait_seconds', 'futex waits'],
  ['kernel_block_service_seconds', 'block I/O service'],
  ['kernel_block_queue_seconds', 'block I/O queue'],
  ['kernel_runqueue_seconds', 'run-queue latency'],
  ['kernel_offcpu_seconds', 'off-CPU time'],
  ['kernel_lock_wait_seconds', 'kernel lock waits'],
  ['kernel_reclaim_stall_seconds', 'reclaim stalls'],
];

/// The latency axis: bucket bounds at the rows' upper edges (fast at the
/// bottom), about every 12 px.
function yAxis(g: Grid): string {
  const ROW = rowOf(g.bounds.length), H = Math.max(1, g.bounds.length) * ROW, every = Math.max(1, Math.ceil(12 / ROW));
  const ticks = g.bounds.flatMap((b, r) => (r % every ? [] : [{ at: (H - (r + 1) * ROW) / H, label: Number.isFinite(b) ? dur(b) : '∞' }]));
  return valueAxis(ticks, 'latency (each row: calls shorter than its upper bound)', H);
}

/// Row height: 6 px, less when there are many rows (at most 200 px in all).
const rowOf = (rows: number) => Math.max(2, Math.min(6, Math.floor(200 / Math.max(rows, 1))));

function draw(canvas: HTMLCanvasElement, g: Grid, lo: number, hi: number): void {
  const ROW = rowOf(g.bounds.length);
  const W = canvas.parentElement?.clientWidth || 800, H = Math.max(1, g.bounds.length) * ROW;
  canvas.width = W; canvas.height = H;
  const ctx = canvas.getContext('2d')!;
  ctx.clearRect(0, 0, W, H);
  const cw = Math.max(1, W / Math.max(1, g.times.length));
  const lmax = Math.log1p(g.max);
  g.cells.forEach((row, r) => {
    const y = H - (r + 1) * ROW; // fast at the bottom
    row.forEach((v, k) => {
      if (v === null || v <= 0) return;
      const [cr, cg, cb] = heat(Math.log1p(v) / lmax);
      ctx.fillStyle = `rgb(${cr},${cg},${cb})`;
      ctx.fillRect(((g.times[k] - lo) / (hi - lo)) * W - cw, y, Math.ceil(cw), ROW);
    });
  });
}

export function latencyHeat(host: string, gen: number): void {
  let metric = LATENCIES[0][0];
  const el = document.querySelector<HTMLElement>('#latency');
  if (!el) return;
  let kept: Steps | null = null;
  const paint = async () => {
    const [lo, hi] = rangeOf(app.view);
    const step = Math.max(1, Math.ceil((hi - lo) / 200));
    // The rate's window spans a few of the tracer's reads (1 s apart by default).
    const q = `sum by (le) (rate(${metric}_bucket{host="${host.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"}[${Math.max(2 * step, 5)}s]))`;
    if (kept?.query !== q || kept.step !== step) kept = new Steps(q, step);
    const steps = kept;
    const [from, to] = steps.want(lo, hi);
    const p = new URLSearchParams({ query: q, start: `${from}`, end: `${to}`, step: `${step}` });
    let r: { data: { result: Series } };
    try { r = await getJson(`/prometheus/api/v1/query_range?${p}`); } catch { return; }
    if (gen !== app.generation || steps !== kept) return;
    const all = steps.add(r.data.result, from, lo);
    const g = latencyGrid(all);
    stats.latencyRows = g.bounds.length;
    // For the Chromium test: the grid drawn and the query it is, over the
    // whole span drawn (asked at once, the same steps).
    const whole = new URLSearchParams({ query: q, start: `${g.times[0] ?? from}`, end: `${g.times[g.times.length - 1] ?? to}`, step: `${step}` });
    stats.latency = { query: whole.toString(), bounds: g.bounds.map(String), times: g.times, cells: g.cells, asked: p.toString() };
    if (g.bounds.length === 0 && metric === LATENCIES[0][0]) { el.replaceChildren(); return; } // no kernel tracing here
    el.innerHTML = `<div class="heat-title">Latency heat map <select id="latency-metric">${LATENCIES.map(([m, t]) => `<option value="${m}"${m === metric ? ' selected' : ''}>${t}</option>`).join('')}</select>
      <small>(rows: latency buckets, fast at the bottom, ${g.bounds.length ? `${dur(g.bounds[0])} to ${Number.isFinite(g.bounds[g.bounds.length - 1]) ? dur(g.bounds[g.bounds.length - 1]) : '∞'}` : 'no events'}; colour: events a second, log scale, up to ${g.max.toPrecision(3)})</small></div>
      <div class="latency"><div class="plot-row">${yAxis(g)}<div class="plot-body"><canvas></canvas>${timeAxis(lo, hi, el.clientWidth - 58)}</div></div>
      ${colourScale('colour: events a second, log scale', [0, 0.25, 0.5, 0.75, 1].map((x) => fmt(Math.expm1(x * Math.log1p(g.max)), 'count')))}</div>`;
    $('#latency-metric').onchange = (e) => { metric = (e.target as HTMLSelectElement).value; paint(); };
    const canvas = el.querySelector('canvas')!;
    draw(canvas, g, lo, hi);
    canvas.onmousemove = (e) => {
      const r = g.bounds.length - 1 - Math.floor(e.offsetY / rowOf(g.bounds.length));
      const t = lo + (e.offsetX / canvas.clientWidth) * (hi - lo);
      let k = 0; while (k < g.times.length - 1 && g.times[k] < t) k++;
      const tip = $('#tip');
      if (r < 0 || r >= g.bounds.length) { tip.style.display = 'none'; return; }
      const v = g.cells[r][k];
      tip.style.display = 'block';
      tip.style.left = `${e.pageX + 12}px`; tip.style.top = `${e.pageY + 12}px`;
      const from = r > 0 ? dur(g.bounds[r - 1]) : '0';
      tip.textContent = `${from} – ${Number.isFinite(g.bounds[r]) ? dur(g.bounds[r]) : '∞'}  ${new Date(g.times[k] * 1000).toLocaleTimeString()}  ${v === null ? 'no data' : `${v.toPrecision(3)} /s`}`;
    };
    canvas.onmouseleave = () => { $('#tip').style.display = 'none'; };
  };
  refresh(paint, 5000);
}
