// kansoku's dashboard: a cluster heat map and per-host charts, loaded from
// /api/v1/query and kept live from /api/v1/live (server-sent events). This
// file builds the header and the health badge, renders the view the URL
// names, polls the alerts (alerts.ts), and starts; the state is in state.ts, the views in views.ts.

import 'uplot/dist/uPlot.min.css';
import './style.css';
import { pollAlerts } from './alerts';
import { pollMarks } from './marks';
import { getJson } from './api';
import { redrawAll } from './charts';
import { $, Superseded, app, rangeOf, setView, stats } from './state';
import { RANGES, SeriesDef, dataSpan, fitRange, parseView } from './transform';
import type { Frame } from './feed';
import { clusterView, hostView } from './views';
import { diskView } from './disk';

function header(): void {
  const ranges = Object.keys(RANGES).map((r) =>
    `<button data-range="${r}" class="${app.view.range === r && app.view.from === undefined ? 'on' : ''}">${r}</button>`).join('');
  $('#controls').innerHTML = `
    <a href="#view=cluster" id="to-cluster" class="${app.view.view === 'cluster' ? 'on' : ''}">Cluster</a>
    ${app.view.host ? `<span class="crumb">› ${app.view.host}</span>` : ''}
    <a href="#view=disk" id="to-disk" class="${app.view.view === 'disk' ? 'on' : ''}" title="where file systems put their files (up --fragmentation)">Disk</a>
    <span class="spacer"></span>
    <button id="pan-back" title="earlier">◀</button>${ranges}<button id="pan-fwd" title="later">▶</button>
    <input type="datetime-local" id="from" step="1" title="custom range: from (local time)">–<input type="datetime-local" id="to" step="1" title="to">
    <button id="apply" class="${app.view.from !== undefined ? 'on' : ''}">custom</button>
    <button id="pause" class="${app.paused || app.view.from !== undefined ? '' : 'live'}">${app.view.from !== undefined ? 'Back to live' : app.paused ? 'Resume' : 'Pause'}</button>
    <button id="theme" title="light/dark">◐</button>
    <span id="health" class="badge">…</span>`;
  document.querySelectorAll<HTMLButtonElement>('[data-range]').forEach((b) => b.onclick = () =>
    setView({ ...app.view, range: b.dataset.range!, from: undefined, to: undefined }));
  $('#pause').onclick = () => {
    if (app.view.from !== undefined) { app.paused = false; setView({ ...app.view, from: undefined, to: undefined }); return; }
    app.paused = !app.paused; header(); if (!app.paused) redrawAll();
  };
  const pan = (dir: number) => {
    const [a, b] = rangeOf(app.view), d = (b - a) / 2 * dir;
    setView({ ...app.view, from: a + d, to: b + d });
  };
  // Custom range: the inputs show the current one; edit and apply.
  const local = (t: number) => { const d = new Date(t * 1000); return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); };
  const [a0, b0] = rangeOf(app.view);
  $<HTMLInputElement>('#from').value = local(a0);
  $<HTMLInputElement>('#to').value = local(b0);
  $('#apply').onclick = () => {
    const from = new Date($<HTMLInputElement>('#from').value).getTime() / 1000;
    const to = new Date($<HTMLInputElement>('#to').value).getTime() / 1000;
    if (Number.isFinite(from) && Number.isFinite(to) && from < to) setView({ ...app.view, from, to });
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
    if (iv && iv > 0) app.interval = iv;
    const drops: [string, number][] = [];
    const add = (sec: string, keys: string[]) => { for (const k of keys) if (s[sec]?.[k]) drops.push([`${sec}.${k}`, s[sec]![k]]); };
    add('store', ['unknown_series_dropped', 'write_errors', 'flush_errors', 'corrupt_blocks', 'corrupt_chunks', 'event_batches_rejected', 'event_write_errors', 'event_corrupt_batches', 'recovered_blocks', 'wal_damaged_kept', 'wal_orphaned_samples', 'event_orphaned_batches']);
    add('collector', ['missed_rounds', 'dropped_batches', 'source_errors']);
    add('snmp', ['silences', 'late', 'kernel_drops', 'dropped_batches', 'missed_intervals']);
    // A thread that panicked: its name is the key's tail (`panics_trace-writer`).
    const threads = s['threads'] ?? {};
    for (const [k, n] of Object.entries(threads)) if (n && (k.startsWith('panics_') || k === 'died' || k === 'panicked_appends')) drops.push([`threads.${k}`, n]);
    const el = document.querySelector<HTMLElement>('#health');
    if (!el) return; // the header is not built yet
    el.className = 'badge ' + (drops.length ? 'warn' : 'ok');
    el.textContent = threads['panics'] ? `thread panics: ${threads['panics']}`
      : drops.length ? `drops: ${drops.reduce((a, [, n]) => a + n, 0)}` : 'no drops';
    el.title = drops.length ? drops.map(([k, n]) => `${k}: ${n}`).join('\n') : 'nothing dropped or missed';
  } catch {
    const el = document.querySelector<HTMLElement>('#health');
    if (el) { el.className = 'badge warn'; el.textContent = 'status unavailable'; }
  }
}

async function render(): Promise<void> {
  const gen = ++app.generation;
  for (const t of app.teardown) t(); app.teardown = [];
  app.live?.close(); app.live = null;
  for (const c of app.charts) c.plot?.destroy();
  app.charts = [];
  header();
  pollAlerts();
  marks();
  const main = $('#main');
  main.innerHTML = '<div class="loading">loading…</div>';
  try {
    if (app.view.view === 'host' && app.view.host) await hostView(main, app.view.host, gen);
    else if (app.view.view === 'disk') await diskView(main, gen);
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
window.addEventListener('popstate', () => { app.view = parseView(location.hash); render(); });
// Resizing lays the app.charts out again; it never refetches.
let resizing = 0; // the pending relayout's timer
window.addEventListener('resize', () => {
  clearTimeout(resizing);
  resizing = window.setTimeout(() => {
    for (const c of app.charts) c.plot?.setSize({ width: (c.plot.root.parentElement?.clientWidth ?? 600) - 8, height: 220 });
    redrawAll();
  }, 150);
});
app.render = render;
header();
setInterval(health, 5000);
setInterval(pollAlerts, 5000);
pollAlerts();
/// The view's marks of loss, then every chart redrawn with them (a past
/// range is not redrawn by the live stream).
function marks(): void { pollMarks().then(redrawAll, () => {}); }
setInterval(marks, 5000);
// The interval first (bucket sizes depend on it), then the first view.
health().finally(() => {
  // With one host and no cluster, start on that host; either way on a
  // range that fits the data there is.
  if (!location.hash) {
    const now = Date.now() / 1000;
    // The last hour to 5 s, the last day to 5 minutes.
    const span = (secs: number, points: number) =>
      getJson<Frame>(`/api/v1/query?query=node_load1&from=${now - secs}&to=${now}&points=${points}`)
        .then((f) => dataSpan(f.times, f.series, now), () => null);
    Promise.all([getJson<{ series: SeriesDef[] }>('/api/v1/series?match=node_load1'), span(3600, 720), span(86400, 288)])
      .then(([r, hour, day]) => {
      const hosts = [...new Set(r.series.map((s) => s.labels.host))];
      const range = fitRange(hour !== null && hour < 3500 ? hour : day);
      if (hosts.length === 1) setView({ view: 'host', host: hosts[0], range }, true);
      else setView({ view: 'cluster', range }, true);
    }).catch(() => render());
  } else render();
});
