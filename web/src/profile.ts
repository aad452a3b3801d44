// A host's per-CPU samples: the top symbols, the flame graph and the
// per-CPU timeline of which process ran, each refreshed every 2 s while
// following live.

import { getJson } from './api';
import { app, rangeOf, refresh, stats } from './state';
import { type Covers, escHtml, progressed } from './transform';

interface TopRow { rank: number; symbol: string; module: string; samples: number; share: number }

/// What this host's CPUs executed over the view's range (per-CPU samples,
/// `--perf`): rank, symbol, module, samples, share. Hidden when there are
/// none; refreshed every 2 s while following live.
export function topSymbols(host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    let r: { samples: number; rows: TopRow[] } & Covers;
    try { r = await getJson(`/api/v1/profile/top?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&n=15&within=${within(named)}`); } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#profile');
    if (!el) return;
    if (r.samples === 0) {
      el.innerHTML = `<div class="absent">top symbols, flame graph and per-CPU timeline: no CPU samples for this host in range — start <code>kansoku up</code> (or the host's <code>agent</code>) with <code>--perf HZ</code>, and <code>--perf-callchain</code> for call chains</div>`;
      return;
    }
    el.innerHTML = `<table class="agents profile"><caption>top symbols · ${r.samples.toLocaleString()} CPU samples ${covered(r, hi)}</caption>
      <tr><th>#</th><th>symbol</th><th>module</th><th>samples</th><th>share</th></tr>
      ${r.rows.map((x) => `<tr><td>${x.rank}</td><td class="sym">${escHtml(x.symbol)}</td><td>${escHtml(x.module)}</td><td>${x.samples}</td>
        <td><span class="bar" style="width:${Math.max(1, x.share).toFixed(0)}px"></span> ${x.share.toFixed(1)} %</td></tr>`).join('')}</table>`;
    return progressed(r, named) ? 'again' : undefined;
  };
  const named = { from: Infinity };
  refresh(draw, 2000);
}

/// How long the server names parts of a range it has not kept before it
/// answers with the newest stretch named (a 15-minute flame graph no page
/// has asked for takes ~10 s to name), counted from the request's arrival:
/// a first ask (nothing named yet, or the last answer whole) is short, so a
/// section's picture appears within a second of the page opening (the
/// page's own requests go before it), and the asks that fill it in take
/// longer (fewer round trips).
function within(named: { from: number }): string {
  return named.from === Infinity ? '400ms' : '800ms';
}


/// "in range", or which part of it an answer holds while the rest is named.
function covered(r: Covers, hi: number): string {
  if (r.complete || r.named_from === null) return 'in range';
  const s = Math.max(0, Math.round(hi - r.named_from));
  return `in the last ${s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`} of the range (naming the rest…)`;
}

/// A frame of the flame graph: [name, samples, depth], in preorder.
type FlameRow = [string, number, number];


/// A colour per name, stable across refreshes: kernel frames warm, the rest cool.
function frameColour(name: string, kernel: boolean): string {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return kernel ? `hsl(${10 + (h % 40)},70%,62%)` : `hsl(${190 + (h % 60)},45%,60%)`;
}

/// The flame graph of this host's samples over the view's range (call
/// chains with `--perf-callchain`; else process and symbol): frames as
/// boxes, callers below callees, click a frame to zoom into it, click the
/// root to zoom out. Refreshed every 2 s while following live.
export function flameGraph(host: string, gen: number): void {
  let zoom = 0; // index of the frame at the bottom
  let last: ({ samples: number; with_call_chains: number; frames: FlameRow[] } & Covers) | null = null;
  let hi = 0; // the end of the range the last answer was asked for
  const render = () => {
    const el = document.querySelector<HTMLElement>('#flame');
    if (!el || !last || last.samples === 0) { if (el) el.replaceChildren(); return; }
    const f = last.frames;
    if (zoom >= f.length) zoom = 0;
    const base = f[zoom];
    const rowH = 17;
    const boxes: string[] = [];
    // Preorder: a frame starts where its parent's previous child ended.
    const next: number[] = [0];
    let depth = 0;
    for (let i = zoom; i < f.length && (i === zoom || f[i][2] > base[2]); i++) {
      const [name, value, d0] = f[i];
      const d = d0 - base[2];
      const left = next[d] ?? 0;
      next[d] = left + value;
      next[d + 1] = left;
      const w = (value / base[1]) * 100;
      if (w < 0.15) continue;
      depth = Math.max(depth, d);
      const kernel = /^[a-z_0-9.]+$/.test(name) && d0 > 1;
      boxes.push(`<div class="fr" data-i="${i}" data-d="${d}" title="${escHtml(name)} · ${value.toLocaleString()} samples · ${(value / last.samples * 100).toFixed(1)} %"
        style="left:${(left / base[1]) * 100}%;width:${w}%;bottom:${d * rowH}px;background:${d0 === 0 ? '#bbb' : frameColour(name, kernel)}">${escHtml(name)}</div>`);
    }
    el.innerHTML = `<div class="flame-title">flame graph · ${last.samples.toLocaleString()} samples${last.complete ? '' : ` ${covered(last, hi)}`}${last.with_call_chains ? '' : ' (no call chains: run with --perf-callchain)'}${zoom ? ` · zoomed into ${escHtml(base[0])} (click the bottom bar to zoom out)` : ''}</div>
      <div class="flame" style="height:${(depth + 1) * rowH}px">${boxes.join('')}</div>`;
    el.querySelectorAll<HTMLElement>('.fr').forEach((b) => { b.onclick = () => { const i = +b.dataset.i!; zoom = i === zoom ? 0 : i; render(); }; });
    // Deep stacks scroll; the roots (the bottom) show first.
    const wrap = document.querySelector<HTMLElement>('#flame-wrap');
    if (wrap) wrap.scrollTop = wrap.scrollHeight;
  };
  const draw = async () => {
    const [lo, to] = rangeOf(app.view);
    let r: typeof last;
    // Frames narrower than a pixel are merged by the server, not sent.
    const width = Math.max(100, document.querySelector<HTMLElement>('#flame-wrap')?.clientWidth || 1000);
    try { r = await getJson(`/api/v1/profile/flame?host=${encodeURIComponent(host)}&from=${lo}&to=${to}&width=${width}&within=${within(named)}`); } catch { return; }
    if (gen !== app.generation || !r) return;
    // Keep a zoom on the same frame name across refreshes.
    const name = last && zoom ? last.frames[zoom]?.[0] : undefined;
    last = r;
    hi = to;
    stats.flameComplete = r.complete;
    zoom = name ? Math.max(0, r.frames.findIndex((x) => x[0] === name)) : 0;
    render();
    return progressed(r, named) ? 'again' : undefined;
  };
  const named = { from: Infinity };
  refresh(draw, 2000);
  // From the processes table: the program's busiest process (`comm (pid)`).
  app.focusFlame = (program: string) => {
    const i = last ? last.frames.findIndex((f) => f[2] === 1 && f[0].startsWith(`${program} (`)) : -1;
    if (i < 0) return;
    zoom = i;
    render();
    document.querySelector('#flame-wrap')?.scrollIntoView({ block: 'nearest' });
  };
}

/// Which process ran on each CPU over the view's range: one row per CPU,
/// one cell per time bucket coloured by the process that ran most in it
/// (darker when it had the CPU less of the time); idle is blank.
export function cpuTimeline(host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    let r: { cpus: { cpu: number; cells: ([number, number, number] | null)[] }[]; processes: Record<string, string>; bucket_ns: number };
    try { r = await getJson(`/api/v1/profile/timeline?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&buckets=300`); } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#timeline');
    if (!el || r.cpus.length === 0) { if (el) el.replaceChildren(); return; }
    const rowH = 12, w = 900;
    const canvas = document.createElement('canvas');
    canvas.width = w; canvas.height = r.cpus.length * rowH;
    const ctx = canvas.getContext('2d')!;
    const seen = new Map<number, number>();
    for (const [row, c] of r.cpus.entries()) {
      const cw = w / c.cells.length;
      c.cells.forEach((cell, i) => {
        if (!cell || cell[0] === 0) return;
        seen.set(cell[0], (seen.get(cell[0]) ?? 0) + cell[1]);
        ctx.globalAlpha = 0.35 + 0.65 * (cell[1] / cell[2]);
        ctx.fillStyle = frameColour(r.processes[cell[0]] ?? String(cell[0]), false);
        ctx.fillRect(i * cw, row * rowH, Math.ceil(cw), rowH - 1);
      });
    }
    const legend = [...seen.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8)
      .map(([pid]) => `<span><i style="background:${frameColour(r.processes[pid] ?? String(pid), false)}"></i>${escHtml(r.processes[pid] ?? String(pid))} (${pid})</span>`).join('');
    el.innerHTML = `<div class="flame-title">per-CPU timeline · ${(r.bucket_ns / 1e6).toFixed(0)} ms per cell · CPU ${r.cpus.map((c) => c.cpu).join(', ')} top to bottom</div><div class="legend">${legend}</div>`;
    el.insertBefore(canvas, el.children[1]);
  };
  refresh(draw, 2000);
}
