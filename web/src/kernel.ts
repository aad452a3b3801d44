// A host's system calls as the kernel measured them (crates/trace): the
// paper's table — rank, call, calls, rate, total time and share, mean,
// min, p50, p99, max — over the view's range, refreshed every 2 s while
// following live. Hidden when the host has no kernel tracing.

import { getJson } from './api';
import { app, rangeOf, refresh, stats } from './state';

interface Row {
  rank: number; syscall: string; calls: number; calls_per_second: number; time_seconds: number; share: number;
  mean_seconds: number | null; min_seconds: number | null; p50_seconds: number | null; p99_seconds: number | null; max_seconds: number | null;
  /// The columns that are lower bounds only (past the tracer's last bucket).
  at_least: string[];
}

/// A duration in seconds as ns, µs, ms or s, three digits; '–' for none.
export function dur(s: number | null): string {
  if (s === null) return '–';
  const a = Math.abs(s);
  if (a === 0) return '0';
  if (a < 1e-6) return `${(s * 1e9).toPrecision(3)} ns`;
  if (a < 1e-3) return `${(s * 1e6).toPrecision(3)} µs`;
  if (a < 1) return `${(s * 1e3).toPrecision(3)} ms`;
  return `${s.toPrecision(3)} s`;
}

export function syscallTable(host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    let r: { syscalls: number; calls: number; time_seconds: number; window: string; rows: Row[] };
    try { r = await getJson(`/api/v1/kernel/syscalls?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&n=15`); } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#kernel');
    if (!el) return;
    if (r.rows.length === 0) {
      el.innerHTML = `<div class="absent">system calls: no kernel tracer data for this host in range — tracing is on by default, off with <code>--trace off</code> or where BPF is refused (the log says why)</div>`;
      return;
    }
    stats.kernelRows = r.rows.length;
    // A column the API marks as a lower bound reads "≥".
    const cell = (x: Row, col: keyof Row) => `<td>${x.at_least.includes(col) ? '≥ ' : ''}${dur(x[col] as number | null)}</td>`;
    el.innerHTML = `<table class="agents kernel"><caption>system calls (in the kernel) · ${Math.round(r.calls).toLocaleString()} calls of ${r.syscalls} kinds, ${dur(r.time_seconds)} in the last ${dur(parseFloat(r.window) / 1000)} with data, by time</caption>
      <tr><th>#</th><th>call</th><th>calls</th><th>per s</th><th>time</th><th>share</th><th>mean</th><th>min</th><th>p50</th><th>p99</th><th>max</th></tr>
      ${r.rows.map((x) => `<tr><td>${x.rank}</td><td class="sym">${x.syscall}</td><td>${Math.round(x.calls).toLocaleString()}</td>
        <td>${x.calls_per_second.toFixed(1)}</td><td>${dur(x.time_seconds)}</td>
        <td><span class="bar" style="width:${Math.max(1, x.share * 100).toFixed(0)}px"></span> ${(x.share * 100).toFixed(1)} %</td>
        ${cell(x, 'mean_seconds')}${cell(x, 'min_seconds')}${cell(x, 'p50_seconds')}${cell(x, 'p99_seconds')}${cell(x, 'max_seconds')}</tr>`).join('')}</table>`;
  };
  refresh(draw, 2000);
}
