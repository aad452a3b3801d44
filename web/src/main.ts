// kansoku's dashboard: a cluster heat map and per-host charts, loaded from
// /api/v1/query and kept live from /api/v1/live (server-sent events).

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { Feed, Frame } from './feed';
import { CLUSTER_METRICS, CORE_HEAT, HOST_PANELS, coreModes } from './panels';
import { PanelSpec, RANGES, SeriesDef, View, fmt, formatView, heat, parseView, selector, stack } from './transform';

const POINTS = 600; // history buckets per chart
const $ = <T extends HTMLElement>(sel: string) => document.querySelector(sel) as T;

/// Measurements for the browser benchmark and the e2e test.
const stats = { updates: 0, frames: [] as number[], lastT: 0, renders: 0, errors: [] as string[], loadedCells: 0 };
(window as unknown as { __kansoku: typeof stats }).__kansoku = stats;

let view: View = parseView(location.hash);
let paused = false;
let live: EventSource | null = null;
let teardown: (() => void)[] = [];
/// Bumped by every render: a view whose data arrives after the user moved on
/// must not touch the new view's DOM.
let generation = 0;
class Superseded extends Error {}
function current(gen: number): void { if (gen !== generation) throw new Superseded(); }

function rangeOf(v: View): [number, number] {
  if (v.from !== undefined && v.to !== undefined) return [v.from, v.to];
  const now = Date.now() / 1000;
  return [now - RANGES[v.range], now];
}
const following = () => view.from === undefined && !paused;

async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error ?? `${r.status}`);
  return body as T;
}

/// The sampling interval (from /api/v1/status): buckets finer than it would
/// hold at most one sample each and draw every point as an island.
let interval = 0.1;
const stepFor = (from: number, to: number) => Math.max((to - from) / POINTS, interval);

function queryUrl(spec: PanelSpec, sel: string, from: number, to: number): string {
  const p = new URLSearchParams({ query: sel, from: from.toFixed(3), to: to.toFixed(3), step: `${Math.round(stepFor(from, to) * 1e6)}us` });
  if (spec.rate) p.set('rate', 'true');
  if (spec.by) { p.set('by', spec.by.join(',')); p.set('group', spec.group ?? 'sum'); }
  return `/api/v1/query?${p}`;
}

function selectorFor(spec: PanelSpec, host: string | null): string {
  return selector(spec, host ? { host } : {});
}

function setView(next: View, replace = false): void {
  view = next;
  const h = formatView(view);
  if (replace) history.replaceState(null, '', h); else history.pushState(null, '', h);
  render();
}

// ---- chrome ------------------------------------------------------------

function css(name: string): string { return getComputedStyle(document.body).getPropertyValue(name).trim(); }

function header(): void {
  const ranges = Object.keys(RANGES).map((r) =>
    `<button data-range="${r}" class="${view.range === r && view.from === undefined ? 'on' : ''}">${r}</button>`).join('');
  $('#controls').innerHTML = `
    <a href="#view=cluster" id="to-cluster" class="${view.view === 'cluster' ? 'on' : ''}">Cluster</a>
    ${view.host ? `<span class="crumb">› ${view.host}</span>` : ''}
    <span class="spacer"></span>
    <button id="pan-back" title="earlier">◀</button>${ranges}<button id="pan-fwd" title="later">▶</button>
    <input type="datetime-local" id="from" step="1" title="custom range: from (local time)">–<input type="datetime-local" id="to" step="1" title="to">
    <button id="apply" class="${view.from !== undefined ? 'on' : ''}">custom</button>
    <button id="pause" class="${paused || view.from !== undefined ? '' : 'live'}">${view.from !== undefined ? 'Back to live' : paused ? 'Resume' : 'Pause'}</button>
    <button id="theme" title="light/dark">◐</button>
    <span id="health" class="badge">…</span>`;
  document.querySelectorAll<HTMLButtonElement>('[data-range]').forEach((b) => b.onclick = () =>
    setView({ ...view, range: b.dataset.range!, from: undefined, to: undefined }));
  $('#pause').onclick = () => {
    if (view.from !== undefined) { paused = false; setView({ ...view, from: undefined, to: undefined }); return; }
    paused = !paused; header(); if (!paused) redrawAll();
  };
  const pan = (dir: number) => {
    const [a, b] = rangeOf(view), d = (b - a) / 2 * dir;
    setView({ ...view, from: a + d, to: b + d });
  };
  // Custom range: the inputs show the current one; edit and apply.
  const local = (t: number) => { const d = new Date(t * 1000); return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); };
  const [a0, b0] = rangeOf(view);
  $<HTMLInputElement>('#from').value = local(a0);
  $<HTMLInputElement>('#to').value = local(b0);
  $('#apply').onclick = () => {
    const from = new Date($<HTMLInputElement>('#from').value).getTime() / 1000;
    const to = new Date($<HTMLInputElement>('#to').value).getTime() / 1000;
    if (Number.isFinite(from) && Number.isFinite(to) && from < to) setView({ ...view, from, to });
    else $('#apply').title = 'from must be before to';
  };
  $('#pan-back').onclick = () => pan(-1);
  $('#pan-fwd').onclick = () => pan(1);
  $('#theme').onclick = () => {
    const dark = document.body.classList.toggle('dark');
    localStorage.setItem('kansoku-theme', dark ? 'dark' : 'light');
    render();
  };
}

async function health(): Promise<void> {
  try {
    const s = await getJson<Record<string, Record<string, number> | null>>('/api/v1/status');
    const iv = (s as unknown as { interval_seconds?: number }).interval_seconds;
    if (iv && iv > 0) interval = iv;
    const drops: [string, number][] = [];
    const add = (sec: string, keys: string[]) => { for (const k of keys) if (s[sec]?.[k]) drops.push([`${sec}.${k}`, s[sec]![k]]); };
    add('store', ['out_of_order_dropped', 'unknown_series_dropped', 'write_errors', 'flush_errors', 'corrupt_blocks', 'corrupt_chunks', 'event_batches_rejected', 'event_write_errors', 'event_corrupt_batches']);
    add('collector', ['missed_rounds', 'dropped_batches', 'source_errors']);
    add('snmp', ['silences', 'late', 'kernel_drops', 'dropped_batches', 'missed_intervals']);
    const el = document.querySelector<HTMLElement>('#health');
    if (!el) return; // the header is not built yet
    el.className = 'badge ' + (drops.length ? 'warn' : 'ok');
    el.textContent = drops.length ? `drops: ${drops.reduce((a, [, n]) => a + n, 0)}` : 'no drops';
    el.title = drops.length ? drops.map(([k, n]) => `${k}: ${n}`).join('\n') : 'nothing dropped or missed';
  } catch {
    const el = document.querySelector<HTMLElement>('#health');
    if (el) { el.className = 'badge warn'; el.textContent = 'status unavailable'; }
  }
}

// ---- charts --------------------------------------------------------------

interface Chart { feed: Feed; plot: uPlot | null; heat?: HeatMap; draw(): void }
let charts: Chart[] = [];

function palette(i: number): string {
  const c = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
  return c[i % c.length];
}

function lineChart(el: HTMLElement, feed: Feed): Chart {
  const spec = feed.spec;
  const n = feed.keys.length;
  const raw = () => feed.columns.cols;
  const series: uPlot.Series[] = [{}];
  // Stacked: draw cumulative sums, top first so lower bands paint over;
  // hover shows each mode's own value.
  const order = [...Array(n).keys()];
  if (spec.stacked) order.reverse();
  for (const i of order) {
    series.push({
      label: feed.label(i), stroke: palette(i), width: 1.25,
      fill: spec.stacked ? palette(i) + 'cc' : undefined,
      value: (_u, _v, _s, idx) => fmt(idx === null ? null : raw()[i][idx], spec.unit),
      spanGaps: false,
    });
  }
  const data = (): uPlot.AlignedData => {
    const cols = spec.stacked ? stack(raw()) : raw();
    return [feed.columns.times, ...order.map((i) => cols[i])] as uPlot.AlignedData;
  };
  const [a, b] = rangeOf(view);
  const axis = { stroke: css('--fg2'), grid: { stroke: css('--grid'), width: 1 }, ticks: { stroke: css('--grid') } };
  const opts: uPlot.Options = {
    title: spec.title, width: (el.clientWidth || 600) - 8, height: 220,
    cursor: { sync: { key: 'x' }, drag: { x: true, y: false, setScale: false } },
    scales: { x: { time: true, min: a, max: b }, y: { range: (_u, lo, hi) => [Math.min(0, lo), Math.max(hi, spec.unit === 'percent' ? 1 : 1e-9)] } },
    axes: [axis, { ...axis, size: 70, values: (_u, ticks) => ticks.map((t) => fmt(t, spec.unit)) }],
    series,
    hooks: {
      setSelect: [(u) => {
        if (u.select.width < 4) return;
        const from = u.posToVal(u.select.left, 'x'), to = u.posToVal(u.select.left + u.select.width, 'x');
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        setView({ ...view, from, to });
      }],
    },
  };
  const plot = new uPlot(opts, data(), el);
  // Wheel: zoom around the cursor; shift+wheel: pan.
  plot.over.addEventListener('wheel', (e) => {
    e.preventDefault();
    const [lo, hi] = rangeOf(view);
    if (e.shiftKey) { const d = (hi - lo) * 0.2 * Math.sign(e.deltaY); setView({ ...view, from: lo + d, to: hi + d }, true); return; }
    const at = plot.posToVal(e.offsetX, 'x'), f = e.deltaY > 0 ? 1.25 : 0.8;
    setView({ ...view, from: at - (at - lo) * f, to: at + (hi - at) * f }, true);
  }, { passive: false });
  return {
    feed, plot,
    draw() {
      const [lo, hi] = rangeOf(view);
      plot.batch(() => { plot.setData(data(), false); plot.setScale('x', { min: lo, max: hi }); });
    },
  };
}

/// 256 heat colours as little-endian RGBA words, for one store per cell.
const LUT = new Uint32Array(256).map((_, i) => {
  const [r, g, b] = heat(i / 255);
  return (255 << 24 | b << 16 | g << 8 | r) >>> 0;
});

/// Rows x time buckets drawn from one ImageData (one pixel per cell, scaled
/// up without smoothing): a full redraw costs rows x buckets writes, no paths.
class HeatMap {
  canvas = document.createElement('canvas');
  private img: ImageData | null = null;
  private off: OffscreenCanvas | null = null;
  order: number[] = [];
  constructor(private host: HTMLElement, private feed: Feed, private max: number | undefined, private onRow: (i: number) => void,
    private rowH: number) {
    host.appendChild(this.canvas);
    this.canvas.onclick = (e) => { const r = Math.floor(e.offsetY / this.rowH); if (r < this.order.length) this.onRow(this.order[r]); };
    this.canvas.onmousemove = (e) => this.tip(e);
    this.canvas.onmouseleave = () => { $('#tip').style.display = 'none'; };
  }
  bucketAt(x: number): number {
    const [lo, hi] = rangeOf(view), t = lo + (x / this.canvas.clientWidth) * (hi - lo);
    const ts = this.feed.columns.times;
    let k = ts.length - 1; while (k > 0 && ts[k] > t) k--;
    return k;
  }
  tip(e: MouseEvent): void {
    const r = Math.floor(e.offsetY / this.rowH), k = this.bucketAt(e.offsetX), tip = $('#tip');
    if (r >= this.order.length || k < 0) { tip.style.display = 'none'; return; }
    const i = this.order[r], v = this.feed.columns.cols[i][k];
    tip.style.display = 'block';
    tip.style.left = `${e.pageX + 12}px`; tip.style.top = `${e.pageY + 12}px`;
    tip.textContent = `${this.feed.label(i)}  ${new Date(this.feed.columns.times[k] * 1000).toLocaleTimeString()}  ${v === null ? 'no data' : fmt(v, this.feed.spec.unit)}`;
  }
  draw(): void {
    const cols = this.feed.columns.cols, times = this.feed.columns.times, rows = this.order.length;
    const [lo, hi] = rangeOf(view);
    const w = Math.max(1, Math.min(POINTS, Math.ceil((hi - lo) / this.feed.columns.step)));
    if (!this.img || this.img.width !== w || this.img.height !== rows) this.img = new ImageData(w, Math.max(rows, 1));
    const px = new Uint32Array(this.img.data.buffer);
    px.fill(0);
    let max = this.max ?? 0;
    if (this.max === undefined) for (const c of cols) for (const v of c) if (v !== null && v > max) max = v;
    const span = hi - lo, scale = max > 0 ? 255 / max : 0;
    for (let k = 0; k < times.length; k++) {
      const x = Math.floor(((times[k] - lo) / span) * w);
      if (x < 0 || x >= w) continue;
      for (let r = 0; r < rows; r++) {
        const v = cols[this.order[r]][k];
        if (v === null) continue; // a gap stays background
        px[r * w + x] = LUT[Math.max(0, Math.min(255, Math.round(v * scale)))];
      }
    }
    const W = this.host.clientWidth || 800, H = rows * this.rowH;
    if (this.canvas.width !== W || this.canvas.height !== H) { this.canvas.width = W; this.canvas.height = H; }
    if (!this.off || this.off.width !== w || this.off.height !== Math.max(rows, 1)) this.off = new OffscreenCanvas(w, Math.max(rows, 1));
    this.off.getContext('2d')!.putImageData(this.img, 0, 0);
    const ctx = this.canvas.getContext('2d')!;
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, W, H);
    ctx.drawImage(this.off, 0, 0, W, H);
  }
}

function redrawAll(): void {
  for (const c of charts) c.draw();
  stats.renders++;
}

// ---- live ------------------------------------------------------------------

function subscribe(match: string, feeds: Feed[], onGrow: () => void): void {
  live?.close();
  const es = new EventSource(`/api/v1/live?match=${encodeURIComponent(match)}`);
  live = es;
  es.addEventListener('series', (e) => {
    const list = (JSON.parse((e as MessageEvent).data) as { series: SeriesDef[] }).series;
    let grew = false;
    for (const f of feeds) grew = f.bind(list) || grew;
    if (grew) onGrow();
  });
  es.addEventListener('points', (e) => {
    const t0 = performance.now();
    const p = JSON.parse((e as MessageEvent).data) as { t: number; values: (number | null)[] };
    for (const f of feeds) f.push(p.t, p.values);
    stats.updates++; stats.lastT = p.t;
    if (following()) {
      const [lo] = rangeOf(view);
      for (const f of feeds) f.columns.trim(lo - f.columns.step);
      redrawAll();
      // uPlot commits in a microtask queued by setData; ours runs after it.
      queueMicrotask(() => { stats.frames.push(performance.now() - t0); if (stats.frames.length > 20000) stats.frames.splice(0, 10000); });
    }
  });
  es.addEventListener('lagged', () => { for (const f of feeds) f.gap(Date.now() / 1000); });
}

// ---- views -----------------------------------------------------------------

interface AgentHost {
  host: string; state: 'live' | 'late' | 'gone'; agent_version: string; clock_offset_ns: number | null;
  rtt_ns: number | null; clock_off: boolean; agent_cpu: number | null; backlog_batches: number | null;
  spool_dropped_samples: number | null; spool_bytes: number | null; samples: number; wire_bytes: number; interval_ns: number;
}

/// On `kansoku server`: every agent, its state, clock offset and overhead,
/// refreshed every 2 s. Elsewhere /api/v1/hosts answers 503 and this stays empty.
function agentsTable(gen: number): void {
  const ms = (ns: number | null) => (ns === null ? '–' : `${(ns / 1e6).toFixed(ns < 1e7 && ns > -1e7 ? 2 : 0)} ms`);
  const draw = async () => {
    let hosts: AgentHost[];
    try { hosts = (await getJson<{ hosts: AgentHost[] }>('/api/v1/hosts')).hosts; } catch { return; }
    if (gen !== generation) return;
    const el = document.querySelector<HTMLElement>('#agents');
    if (!el) return;
    const off = hosts.filter((h) => h.clock_off).length;
    const count = (s: string) => hosts.filter((h) => h.state === s).length;
    el.innerHTML = `<table class="agents"><caption>${hosts.length} agents: ${count('live')} live, ${count('late')} late, ${count('gone')} gone${off ? ` · <span class="badge warn">${off} with clocks off by more than their interval</span>` : ''}</caption>
      <tr><th>host</th><th>state</th><th>version</th><th>clock offset</th><th>rtt</th><th>agent CPU</th><th>backlog</th><th>spool</th><th>spool drops</th><th>samples</th><th>wire B/sample</th></tr>
      ${hosts.map((h) => `<tr data-host="${h.host}"><td><a href="#view=host&host=${encodeURIComponent(h.host)}&range=15m">${h.host}</a></td>
        <td><span class="badge ${h.state === 'live' ? 'ok' : 'warn'}">${h.state}</span></td><td>${h.agent_version}</td>
        <td class="${h.clock_off ? 'warn' : ''}" title="interval ${ms(h.interval_ns)}">${ms(h.clock_offset_ns)}</td><td>${ms(h.rtt_ns)}</td>
        <td>${h.agent_cpu === null ? '–' : (h.agent_cpu * 100).toFixed(2) + ' %'}</td><td>${h.backlog_batches ?? '–'}</td><td>${h.spool_bytes === null ? '–' : (h.spool_bytes / 1048576).toFixed(1) + ' MiB'}</td>
        <td class="${h.spool_dropped_samples ? 'warn' : ''}">${h.spool_dropped_samples ?? '–'}</td><td>${h.samples}</td>
        <td>${h.samples ? (h.wire_bytes / h.samples).toFixed(2) : '–'}</td></tr>`).join('')}</table>`;
  };
  draw();
  const t = setInterval(draw, 2000);
  teardown.push(() => clearInterval(t));
}

async function clusterView(main: HTMLElement, gen: number): Promise<void> {
  const key = view.metric && view.metric in CLUSTER_METRICS ? view.metric : 'cpu';
  const spec = CLUSTER_METRICS[key];
  main.innerHTML = `<div class="bar"><label>metric <select id="metric">${Object.entries(CLUSTER_METRICS).map(([k, m]) =>
    `<option value="${k}" ${k === key ? 'selected' : ''}>${m.title}</option>`).join('')}</select></label>
    <label>sort <select id="sort"><option value="name">by name</option><option value="value">by current value</option></select></label>
    <span id="count"></span></div><div id="agents"></div><div class="cluster"><div id="names"></div><div id="heat"></div></div>`;
  agentsTable(gen);
  $<HTMLSelectElement>('#metric').onchange = (e) => setView({ ...view, metric: (e.target as HTMLSelectElement).value });
  const [lo, hi] = rangeOf(view);
  const feed = new Feed(spec, stepFor(lo, hi));
  const frame = await getJson<Frame>(queryUrl(spec, selectorFor(spec, null), lo, hi));
  current(gen);
  feed.load(frame);
  const rows = feed.keys.length;
  const rowH = Math.max(3, Math.min(18, Math.floor(900 / Math.max(rows, 1))));
  const hm = new HeatMap($('#heat'), feed, spec.max, (i) => {
    const host = feed.defs[i].labels.host;
    if (host) setView({ view: 'host', host, range: view.range, from: view.from, to: view.to });
  }, rowH);
  const sortSel = $<HTMLSelectElement>('#sort');
  const names = $('#names');
  const sort = () => {
    const idx = [...Array(feed.keys.length).keys()];
    if (sortSel.value === 'value') {
      const cur = (i: number) => { const c = feed.columns.cols[i]; for (let k = c.length - 1; k >= 0; k--) if (c[k] !== null) return c[k]!; return -Infinity; };
      idx.sort((a, b) => cur(b) - cur(a));
    } else idx.sort((a, b) => feed.label(a).localeCompare(feed.label(b)));
    hm.order = idx;
    names.style.fontSize = `${Math.min(12, rowH)}px`;
    names.innerHTML = rowH >= 9 ? idx.map((i) => `<div style="height:${rowH}px">${feed.defs[i].labels.host ?? feed.label(i)}</div>`).join('') : '';
  };
  sortSel.onchange = () => { sort(); hm.draw(); };
  sort();
  $('#count').textContent = `${feed.keys.length} hosts · ${spec.title} · click a row for its host`;
  charts = [{ feed, plot: null, heat: hm, draw: () => hm.draw() }];
  hm.draw();
  subscribe(selectorFor(spec, null), [feed], () => { sort(); });
  // Re-sort by value about once a second, not every frame.
  const t = setInterval(() => { if (sortSel.value === 'value') sort(); }, 1000);
  teardown.push(() => clearInterval(t));
}

interface TopRow { rank: number; symbol: string; module: string; samples: number; share: number }

/// What this host's CPUs executed over the view's range (per-CPU samples,
/// `--perf`): rank, symbol, module, samples, share. Hidden when there are
/// none; refreshed every 2 s while following live.
function topSymbols(host: string, gen: number): void {
  const esc = (t: string) => t.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]!));
  const draw = async () => {
    const [lo, hi] = rangeOf(view);
    let r: { samples: number; rows: TopRow[] };
    try { r = await getJson(`/api/v1/profile/top?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&n=15`); } catch { return; }
    if (gen !== generation) return;
    const el = document.querySelector<HTMLElement>('#profile');
    if (!el || r.samples === 0) { if (el) el.replaceChildren(); return; }
    el.innerHTML = `<table class="agents profile"><caption>top symbols · ${r.samples.toLocaleString()} CPU samples in range</caption>
      <tr><th>#</th><th>symbol</th><th>module</th><th>samples</th><th>share</th></tr>
      ${r.rows.map((x) => `<tr><td>${x.rank}</td><td class="sym">${esc(x.symbol)}</td><td>${esc(x.module)}</td><td>${x.samples}</td>
        <td><span class="bar" style="width:${Math.max(1, x.share).toFixed(0)}px"></span> ${x.share.toFixed(1)} %</td></tr>`).join('')}</table>`;
  };
  draw();
  const t = setInterval(() => { if (view.from === undefined) draw(); }, 2000);
  teardown.push(() => clearInterval(t));
}

/// A frame of the flame graph: [name, samples, depth], in preorder.
type FlameRow = [string, number, number];

const escHtml = (t: string) => t.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]!));

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
function flameGraph(host: string, gen: number): void {
  let zoom = 0; // index of the frame at the bottom
  let last: { samples: number; with_call_chains: number; frames: FlameRow[] } | null = null;
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
    el.innerHTML = `<div class="flame-title">flame graph · ${last.samples.toLocaleString()} samples${last.with_call_chains ? '' : ' (no call chains: run with --perf-callchain)'}${zoom ? ` · zoomed into ${escHtml(base[0])} (click the bottom bar to zoom out)` : ''}</div>
      <div class="flame" style="height:${(depth + 1) * rowH}px">${boxes.join('')}</div>`;
    el.querySelectorAll<HTMLElement>('.fr').forEach((b) => { b.onclick = () => { const i = +b.dataset.i!; zoom = i === zoom ? 0 : i; render(); }; });
    // Deep stacks scroll; the roots (the bottom) show first.
    const wrap = document.querySelector<HTMLElement>('#flame-wrap');
    if (wrap) wrap.scrollTop = wrap.scrollHeight;
  };
  const draw = async () => {
    const [lo, hi] = rangeOf(view);
    let r: typeof last;
    try { r = await getJson(`/api/v1/profile/flame?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}`); } catch { return; }
    if (gen !== generation) return;
    // Keep a zoom on the same frame name across refreshes.
    const name = last && zoom ? last.frames[zoom]?.[0] : undefined;
    last = r;
    zoom = name ? Math.max(0, r!.frames.findIndex((x) => x[0] === name)) : 0;
    render();
  };
  draw();
  const t = setInterval(() => { if (view.from === undefined) draw(); }, 2000);
  teardown.push(() => clearInterval(t));
}

/// Which process ran on each CPU over the view's range: one row per CPU,
/// one cell per time bucket coloured by the process that ran most in it
/// (darker when it had the CPU less of the time); idle is blank.
function cpuTimeline(host: string, gen: number): void {
  const draw = async () => {
    const [lo, hi] = rangeOf(view);
    let r: { cpus: { cpu: number; cells: ([number, number, number] | null)[] }[]; processes: Record<string, string>; bucket_ns: number };
    try { r = await getJson(`/api/v1/profile/timeline?host=${encodeURIComponent(host)}&from=${lo}&to=${hi}&buckets=300`); } catch { return; }
    if (gen !== generation) return;
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
  draw();
  const t = setInterval(() => { if (view.from === undefined) draw(); }, 2000);
  teardown.push(() => clearInterval(t));
}

async function hostView(main: HTMLElement, host: string, gen: number): Promise<void> {
  const [lo, hi] = rangeOf(view);
  const core = view.core ?? '0';
  const specs = [...HOST_PANELS.slice(0, 1), coreModes(core), ...HOST_PANELS.slice(1)];
  main.innerHTML = `<h2 class="heat-title">${CORE_HEAT.title} <small>(click a core for its modes)</small></h2><div id="cores" class="cores"></div>` +
    `<div id="profile"></div><div id="flame-wrap"><div id="flame"></div></div><div id="timeline"></div>` +
    `<div class="grid">${specs.map((s) => `<div class="panel" id="p-${s.id}"></div>`).join('')}</div>`;
  topSymbols(host, gen);
  flameGraph(host, gen);
  cpuTimeline(host, gen);
  const step = stepFor(lo, hi);
  const feeds = specs.map((s) => new Feed(s, step));
  const coreFeed = new Feed(CORE_HEAT, step);
  const all = [coreFeed, ...feeds];
  const frames = await Promise.all(all.map((f) => getJson<Frame>(queryUrl(f.spec, selectorFor(f.spec, host), lo, hi))));
  current(gen);
  all.forEach((f, i) => f.load(frames[i]));
  stats.loadedCells = frames.reduce((n, fr) => n + fr.series.reduce((m, s) => m + s.values.filter((v) => v !== null).length, 0), 0);
  const build = () => {
    for (const c of charts) c.plot?.destroy();
    charts = [];
    const hm = new HeatMap($('#cores'), coreFeed, 100, (i) => setView({ ...view, core: coreFeed.defs[i].labels.cpu }, true), 10);
    $('#cores').replaceChildren(hm.canvas);
    hm.order = [...coreFeed.keys.keys()].sort((a, b) => +coreFeed.defs[a].labels.cpu - +coreFeed.defs[b].labels.cpu);
    charts.push({ feed: coreFeed, plot: null, heat: hm, draw: () => hm.draw() });
    feeds.forEach((f) => {
      const el = $(`#p-${f.spec.id}`);
      el.replaceChildren();
      if (f.keys.length === 0) { el.innerHTML = `<div class="empty">${f.spec.title}: no data on this host</div>`; return; }
      charts.push(lineChart(el, f));
    });
    redrawAll();
  };
  build();
  subscribe(`{host="${host}"}`, all, build);
}

async function render(): Promise<void> {
  const gen = ++generation;
  for (const t of teardown) t(); teardown = [];
  live?.close(); live = null;
  for (const c of charts) c.plot?.destroy();
  charts = [];
  header();
  const main = $('#main');
  main.innerHTML = '<div class="loading">loading…</div>';
  try {
    if (view.view === 'host' && view.host) await hostView(main, view.host, gen);
    else await clusterView(main, gen);
  } catch (e) {
    if (e instanceof Superseded) return;
    stats.errors.push(String(e));
    main.innerHTML = `<div class="error">${String(e)}</div>`;
  }
}

if (localStorage.getItem('kansoku-theme') === 'dark' ||
  (localStorage.getItem('kansoku-theme') === null && matchMedia('(prefers-color-scheme: dark)').matches)) {
  document.body.classList.add('dark');
}
window.addEventListener('popstate', () => { view = parseView(location.hash); render(); });
// Resizing lays the charts out again; it never refetches.
let resizing = 0;
window.addEventListener('resize', () => {
  clearTimeout(resizing);
  resizing = window.setTimeout(() => {
    for (const c of charts) c.plot?.setSize({ width: (c.plot.root.parentElement?.clientWidth ?? 600) - 8, height: 220 });
    redrawAll();
  }, 150);
});
header();
setInterval(health, 5000);
// The interval first (bucket sizes depend on it), then the first view.
health().finally(() => {
  // With one host and no cluster, start on that host.
  if (!location.hash) {
    getJson<{ series: SeriesDef[] }>('/api/v1/series?match=node_load1').then((r) => {
      const hosts = [...new Set(r.series.map((s) => s.labels.host))];
      if (hosts.length === 1) setView({ view: 'host', host: hosts[0], range: '15m' }, true); else render();
    }).catch(() => render());
  } else render();
});
