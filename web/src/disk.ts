// The disk view (seed 001's DAV): where a file system put its files, from
// the maps `kansoku up --fragmentation PATH` keeps. Two maps side by side
// (before, after: any two kept, the oldest and the newest by default), each
// the device's address space in cells coloured by the scanned file with
// most bytes in the cell (the same file, the same colour; a cell with any
// byte of one shows it), free space light and everything else grey; under each, its figures and the most fragmented files.

import { getJson } from './api';
import { app, setView, stats } from './state';
import { cellColours, escHtml, fmt } from './transform';

interface Figures {
  files: number; file_bytes: number; runs: number; fragmented_files: number; extra_runs: number;
  free_bytes: number | null; free_extents: number | null; free_largest_bytes: number | null; free_fragmentation: number | null;
  skipped_files: number; scan_seconds: number;
}
interface MapAnswer {
  time: string; path: string; device_bytes: number; from: number; to: number; block_size: number; figures: Figures; truncated: boolean;
  cells: number[]; owners: string[]; most_fragmented: { path: string; size: number; runs: number; extra_runs: number }[];
}

const COLS = 128, ROWS = 64, PX = 4;

const when = (ns: string) => new Date(Number(ns) / 1e6).toLocaleString();

function drawMap(el: HTMLElement, m: MapAnswer, title: string): void {
  const canvas = document.createElement('canvas');
  canvas.width = COLS * PX; canvas.height = ROWS * PX;
  const ctx = canvas.getContext('2d')!;
  const colours = cellColours(m.cells, m.owners, document.body.classList.contains('dark'));
  colours.forEach((c, i) => { ctx.fillStyle = c; ctx.fillRect((i % COLS) * PX, Math.floor(i / COLS) * PX, PX, PX); });
  canvas.onmousemove = (e) => {
    const r = canvas.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top) / PX) * COLS + Math.floor((e.clientX - r.left) / PX);
    const c = m.cells[i];
    const at = m.from + (i * (m.to - m.from)) / m.cells.length;
    canvas.title = `${fmt(at, 'bytes')} into the device: ${c === -1 ? 'free' : c < 0 ? 'metadata or files not scanned' : m.owners[c]}`;
  };
  const f = m.figures;
  const pct = (v: number | null) => (v === null ? '–' : `${(v * 100).toFixed(1)} %`);
  el.innerHTML = `<h3>${title}: ${when(m.time)} · bytes ${fmt(m.from, 'bytes')} – ${fmt(m.to, 'bytes')} of ${fmt(m.device_bytes, 'bytes')}</h3>`;
  el.appendChild(canvas);
  el.insertAdjacentHTML('beforeend', `<table class="agents frag"><tr><th>files</th><td>${f.files}</td><th>fragmented</th><td>${f.fragmented_files}</td></tr>
    <tr><th>runs</th><td>${f.runs}</td><th>runs beyond need</th><td>${f.extra_runs}</td></tr>
    <tr><th>free</th><td>${f.free_bytes === null ? 'unknown (no GETFSMAP)' : fmt(f.free_bytes, 'bytes')}</td><th>free extents</th><td>${f.free_extents ?? '–'}</td></tr>
    <tr><th>largest free</th><td>${f.free_largest_bytes === null ? '–' : fmt(f.free_largest_bytes, 'bytes')}</td><th>free space in pieces</th><td>${pct(f.free_fragmentation)}</td></tr>
    <tr><th>skipped</th><td>${f.skipped_files}</td><th>scan</th><td>${f.scan_seconds.toFixed(3)} s</td></tr></table>
    <table class="agents frag-files"><caption>most fragmented files${m.truncated ? ' (map truncated)' : ''}</caption>
    <tr><th>file</th><th>size</th><th>runs</th><th>beyond need</th></tr>
    ${m.most_fragmented.map((x) => `<tr><td class="sym">${escHtml(x.path)}</td><td>${fmt(x.size, 'bytes')}</td><td>${x.runs}</td><td>${x.extra_runs}</td></tr>`).join('') || '<tr><td colspan=4>none: every file is in as few runs as it needs</td></tr>'}</table>`);
}

export async function diskView(main: HTMLElement, gen: number): Promise<void> {
  const list = await getJson<{ paths: string[]; times: string[] }>('/api/v1/fragmentation');
  if (gen !== app.generation) return;
  if (list.times.length === 0) {
    // The first scan runs at start and may take a while on a large file
    // system: look again until it is kept.
    main.innerHTML = `<div class="empty">no map kept yet: the first scan of ${escHtml(list.paths.join(', '))} is running</div>`;
    const t = setTimeout(() => { if (gen === app.generation) void diskView(main, gen); }, 1000);
    app.teardown.push(() => clearTimeout(t));
    return;
  }
  const path = app.view.path && list.paths.includes(app.view.path) ? app.view.path : list.paths[0];
  const times = list.times;
  const before = app.view.before && times.includes(app.view.before) ? app.view.before : times[0];
  const after = app.view.after && times.includes(app.view.after) ? app.view.after : times[times.length - 1];
  const zoom = app.view.zoom === 'files' ? 'files' : 'device';
  const opts = (sel: string) => times.map((t) => `<option value="${t}" ${t === sel ? 'selected' : ''}>${when(t)}</option>`).join('');
  main.innerHTML = `<div class="bar"><label>path <select id="frag-path">${list.paths.map((p) => `<option ${p === path ? 'selected' : ''}>${escHtml(p)}</option>`).join('')}</select></label>
    <label>before <select id="frag-before">${opts(before)}</select></label><label>after <select id="frag-after">${opts(after)}</select></label>
    <label>map <select id="frag-zoom"><option value="device">the whole device</option><option value="files" ${zoom === 'files' ? 'selected' : ''}>the files' span</option></select></label>
    <span>${times.length} maps kept · cells: ${COLS} × ${ROWS} over the device, a cell with any byte of a file shows the file</span></div>
    <div class="frag-maps"><div id="frag-a"></div><div id="frag-b"></div></div>`;
  const go = () => setView({ ...app.view, view: 'disk', path: (document.querySelector('#frag-path') as HTMLSelectElement).value,
    before: (document.querySelector('#frag-before') as HTMLSelectElement).value, after: (document.querySelector('#frag-after') as HTMLSelectElement).value,
    zoom: (document.querySelector('#frag-zoom') as HTMLSelectElement).value });
  for (const id of ['#frag-path', '#frag-before', '#frag-after', '#frag-zoom']) (document.querySelector(id) as HTMLSelectElement).onchange = go;
  const url = (t: string) => `/api/v1/fragmentation/map?path=${encodeURIComponent(path)}&time=${t}&cells=${COLS * ROWS}&zoom=${zoom}`;
  const [a, b] = await Promise.all([getJson<MapAnswer>(url(before)), getJson<MapAnswer>(url(after))]);
  if (gen !== app.generation) return;
  drawMap(document.querySelector('#frag-a')!, a, 'before');
  drawMap(document.querySelector('#frag-b')!, b, 'after');
  stats.diskMaps = 2;
}
