// A host's processes and cgroups (kansoku up --processes): the programs
// (process groups) with the most CPU over the view's range, each with its
// CPU sparkline, resident memory and process count — a click on a row zooms
// the flame graph into that program's processes — and the cgroups likewise
// (CPU, memory, tasks). Every column is a PromQL query the server evaluates
// and names (`/api/v1/tasks`, shown as each heading's tooltip). Refreshed
// every 5 s while following live; hidden when the host has no such series.

import { getJson } from './api';
import { app, rangeOf, refresh, stats } from './state';
import { escHtml, fmt } from './transform';

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

/// One table of `/api/v1/tasks` (every column a PromQL query; the answer
/// names them).
interface TableSpec {
  el: string; kind: 'processes' | 'cgroups'; caption: string; head: string; count: string;
  click?: (name: string) => void; stat: 'processRows' | 'cgroupRows';
}

/// `/api/v1/tasks`'s answer.
export interface TasksAnswer {
  groups: number; window?: string; rate_window?: string; queries?: Record<string, string>;
  rows: { rank: number; name: string; cores: number | null; now: number | null; spark: (number | null)[];
    resident_bytes: number | null; count: number | null }[];
}

const TABLES: TableSpec[] = [
  { el: '#processes', kind: 'processes', caption: 'processes by CPU over the range', head: 'program', count: 'procs',
    click: (n) => app.focusFlame(n), stat: 'processRows' },
  { el: '#cgroups', kind: 'cgroups', caption: 'cgroups by CPU over the range', head: 'cgroup', count: 'tasks',
    stat: 'cgroupRows' },
];

export function processTable(host: string, gen: number): void {
  for (const t of TABLES) table(t, host, gen);
}

/// Cores with three decimals, or a dash.
const cores = (v: number | null) => (v === null ? '–' : v.toFixed(3));

function table(spec: TableSpec, host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    let t: TasksAnswer;
    try {
      t = await getJson<TasksAnswer>(`/api/v1/tasks?host=${encodeURIComponent(host)}&kind=${spec.kind}&n=15&points=60&from=${lo}&to=${hi}`);
    } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>(spec.el);
    if (!el) return;
    const rows = t.rows;
    if (rows.length === 0) {
      // Say why the section is empty and how to fill it (issue 44).
      el.innerHTML = spec.stat === 'processRows'
        ? `<div class="absent">${spec.caption}: no process series for this host in range — start <code>kansoku up</code> (or the host's <code>agent</code>) with <code>--processes</code></div>`
        : '';
      return;
    }
    const max = Math.max(...rows.map((r) => Math.max(...r.spark.map((v) => v ?? 0))));
    const title = (k: string) => escHtml(t.queries?.[k] ?? '');
    el.innerHTML = `<table class="agents processes"><caption>${spec.caption} (${t.groups})${spec.click ? ' · click one for its flame graph' : ''}</caption>
      <tr><th>${spec.head}</th><th title="${title('cores')}">CPU (cores)</th><th title="${title('spark')}">over the range</th><th title="${title('now')}">now</th><th title="${title('resident_bytes')}">resident</th><th title="${title('count')}">${spec.count}</th></tr>
      ${rows.map((r, i) => `<tr data-group="${escHtml(r.name)}"><td class="sym">${escHtml(r.name)}</td><td>${cores(r.cores)}</td>
        <td><canvas class="spark" width="120" height="20" data-i="${i}"></canvas></td><td>${cores(r.now)}</td>
        <td>${fmt(r.resident_bytes, 'bytes')}</td><td>${r.count ?? '–'}</td></tr>`).join('')}</table>`;
    el.querySelectorAll<HTMLCanvasElement>('canvas.spark').forEach((c) => spark(c, rows[+c.dataset.i!].spark, max));
    if (spec.click) {
      const click = spec.click;
      el.querySelectorAll<HTMLElement>('tr[data-group]').forEach((tr) => { tr.onclick = () => click(tr.dataset.group!); });
    }
    stats[spec.stat] = rows.length;
  };
  refresh(draw, 5000);
}
