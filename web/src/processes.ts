// A host's processes and cgroups (kansoku up --processes): the programs
// (process groups) with the most CPU over the view's range, each with its
// CPU sparkline, resident memory and process count — a click on a row zooms
// the flame graph into that program's processes — and the cgroups likewise
// (CPU, memory, tasks). Refreshed every 5 s while following live; hidden
// when the host has no such series.

import { getJson } from './api';
import type { Frame } from './feed';
import { app, rangeOf, refresh, stats } from './state';
import { escHtml, fmt, topGroups } from './transform';

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

/// One table: the series of `cpu`, `mem` and `count` grouped by `label`.
interface TableSpec {
  el: string; label: string; caption: string; head: string; count: string;
  cpu: string; mem: string; countMetric: string; click?: (name: string) => void; stat: 'processRows' | 'cgroupRows';
}

const TABLES: TableSpec[] = [
  { el: '#processes', label: 'groupname', caption: 'processes by CPU over the range', head: 'program', count: 'procs',
    cpu: 'namedprocess_namegroup_cpu_seconds_total', mem: 'namedprocess_namegroup_memory_bytes',
    countMetric: 'namedprocess_namegroup_num_procs', click: (n) => app.focusFlame(n), stat: 'processRows' },
  { el: '#cgroups', label: 'id', caption: 'cgroups by CPU over the range', head: 'cgroup', count: 'tasks',
    cpu: 'container_cpu_usage_seconds_total', mem: 'container_memory_working_set_bytes',
    countMetric: 'container_processes', stat: 'cgroupRows' },
];

export function processTable(host: string, gen: number): void {
  for (const t of TABLES) table(t, host, gen);
}

function table(spec: TableSpec, host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    const q = (m: string, extra: string) =>
      `/api/v1/query?query=${encodeURIComponent(`${m}{host="${host}"}`)}&by=${spec.label}&points=60&from=${lo}&to=${hi}${extra}`;
    let cpu: Frame, mem: Frame, procs: Frame;
    try {
      [cpu, mem, procs] = await Promise.all([
        getJson<Frame>(q(spec.cpu, '&rate=true')),
        getJson<Frame>(q(spec.mem, '')),
        getJson<Frame>(q(spec.countMetric, '')),
      ]);
    } catch { return; }
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>(spec.el);
    if (!el) return;
    const rows = topGroups(cpu.series, spec.label, 15);
    if (rows.length === 0) {
      // Say why the section is empty and how to fill it (issue 44).
      el.innerHTML = spec.stat === 'processRows'
        ? `<div class="absent">${spec.caption}: no process series for this host in range — start <code>kansoku up</code> (or the host's <code>agent</code>) with <code>--processes</code></div>`
        : '';
      return;
    }
    const lastOf = (f: Frame, name: string) => {
      const s = f.series.find((x) => x.labels[spec.label] === name);
      return s ? [...s.values].reverse().find((v) => v !== null) ?? null : null;
    };
    const max = Math.max(...rows.map((r) => Math.max(...r.values.map((v) => v ?? 0))));
    el.innerHTML = `<table class="agents processes"><caption>${spec.caption} (${cpu.series.length})${spec.click ? ' · click one for its flame graph' : ''}</caption>
      <tr><th>${spec.head}</th><th>CPU (cores)</th><th>over the range</th><th>now</th><th>resident</th><th>${spec.count}</th></tr>
      ${rows.map((r, i) => `<tr data-group="${escHtml(r.name)}"><td class="sym">${escHtml(r.name)}</td><td>${r.mean.toFixed(3)}</td>
        <td><canvas class="spark" width="120" height="20" data-i="${i}"></canvas></td><td>${r.last === null ? '–' : r.last.toFixed(3)}</td>
        <td>${fmt(lastOf(mem, r.name), 'bytes')}</td><td>${lastOf(procs, r.name) ?? '–'}</td></tr>`).join('')}</table>`;
    el.querySelectorAll<HTMLCanvasElement>('canvas.spark').forEach((c) => spark(c, rows[+c.dataset.i!].values, max));
    if (spec.click) {
      const click = spec.click;
      el.querySelectorAll<HTMLElement>('tr[data-group]').forEach((tr) => { tr.onclick = () => click(tr.dataset.group!); });
    }
    stats[spec.stat] = rows.length;
  };
  refresh(draw, 5000);
}
