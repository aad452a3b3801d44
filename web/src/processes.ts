// A host's processes (kansoku up --processes): the process groups with the
// most CPU over the view's range, each with its CPU sparkline, resident
// memory and process count; a click on a row zooms the flame graph into
// that program's processes. Refreshed every 5 s while following live;
// hidden when the host has no process series.

import { getJson } from './api';
import type { Frame } from './feed';
import { app, rangeOf, stats } from './state';
import { fmt, topGroups } from './transform';

const esc = (t: string) => t.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]!));

function spark(canvas: HTMLCanvasElement, values: (number | null)[], max: number): void {
  const ctx = canvas.getContext('2d')!;
  const { width: w, height: h } = canvas;
  ctx.clearRect(0, 0, w, h);
  ctx.strokeStyle = getComputedStyle(document.body).getPropertyValue('--accent') || '#2a6fdb';
  ctx.beginPath();
  let pen = false;
  values.forEach((v, i) => {
    if (v === null) { pen = false; return; }
    const x = (i / Math.max(1, values.length - 1)) * (w - 1), y = h - 1 - (v / (max || 1)) * (h - 2);
    if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    pen = true;
  });
  ctx.stroke();
}

export function processTable(host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    const q = (m: string, extra: string) =>
      `/api/v1/query?query=${encodeURIComponent(`${m}{host="${host}"}`)}&by=groupname&points=60&from=${lo}&to=${hi}${extra}`;
    let cpu: Frame, mem: Frame, procs: Frame;
    try {
      [cpu, mem, procs] = await Promise.all([
        getJson<Frame>(q('namedprocess_namegroup_cpu_seconds_total', '&rate=true')),
        getJson<Frame>(q('namedprocess_namegroup_memory_bytes', '')),
        getJson<Frame>(q('namedprocess_namegroup_num_procs', '')),
      ]);
    } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#processes');
    if (!el) return;
    const rows = topGroups(cpu.series, 'groupname', 15);
    if (rows.length === 0) { el.replaceChildren(); return; }
    const lastOf = (f: Frame, name: string) => {
      const s = f.series.find((x) => x.labels.groupname === name);
      return s ? [...s.values].reverse().find((v) => v !== null) ?? null : null;
    };
    const max = Math.max(...rows.map((r) => Math.max(...r.values.map((v) => v ?? 0))));
    el.innerHTML = `<table class="agents processes"><caption>processes by CPU over the range (${cpu.series.length} programs) · click one for its flame graph</caption>
      <tr><th>program</th><th>CPU (cores)</th><th>over the range</th><th>now</th><th>resident</th><th>procs</th></tr>
      ${rows.map((r, i) => `<tr data-group="${esc(r.name)}"><td class="sym">${esc(r.name)}</td><td>${r.mean.toFixed(3)}</td>
        <td><canvas class="spark" width="120" height="20" data-i="${i}"></canvas></td><td>${r.last === null ? '–' : r.last.toFixed(3)}</td>
        <td>${fmt(lastOf(mem, r.name), 'bytes')}</td><td>${lastOf(procs, r.name) ?? '–'}</td></tr>`).join('')}</table>`;
    el.querySelectorAll<HTMLCanvasElement>('canvas.spark').forEach((c) => spark(c, rows[+c.dataset.i!].values, max));
    el.querySelectorAll<HTMLElement>('tr[data-group]').forEach((tr) => { tr.onclick = () => app.focusFlame(tr.dataset.group!); });
    stats.processRows = rows.length;
  };
  draw();
  const t = setInterval(() => { if (app.view.from === undefined) draw(); }, 5000);
  app.teardown.push(() => clearInterval(t));
}
