// The two views: the cluster (a heat map of every host, the agents' table)
// and one host (its cores' heat map, its per-CPU samples, its panels).

import { getJson, queryUrl, selectorFor } from './api';
import { lineChart, redrawAll } from './charts';
import { Feed, Frame } from './feed';
import { HeatMap } from './heatmap';
import { subscribe } from './live';
import { CLUSTER_METRICS, CORE_HEAT, HOST_PANELS, coreModes } from './panels';
import { COLOURS, verdictStrip } from './diagnosis';
import { syscallTable } from './kernel';
import { processTable } from './processes';
import { loadRuns } from './loadruns';
import { latencyHeat } from './latency';
import { cpuTimeline, flameGraph, topSymbols } from './profile';
import { $, app, current, rangeOf, refresh, setView, stats, stepFor } from './state';
import { definition, unionSelector } from './transform';

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
    if (gen !== app.generation) return;
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
  refresh(draw, 2000, true);
}

export async function clusterView(main: HTMLElement, gen: number): Promise<void> {
  const key = app.view.metric && app.view.metric in CLUSTER_METRICS ? app.view.metric : 'cpu';
  const spec = CLUSTER_METRICS[key];
  // Offer only metrics the store has series of (no SNMP menu entries
  // without SNMP targets), and the one asked for.
  let known: Set<string> | null = null;
  try { known = new Set((await getJson<{ data: string[] }>('/prometheus/api/v1/label/__name__/values')).data); } catch { /* offer all */ }
  current(gen);
  const offered = Object.entries(CLUSTER_METRICS).filter(([k, m]) => k === key || !known || m.names.some((n) => known!.has(n)));
  main.innerHTML = `<div class="bar"><label>metric <select id="metric">${offered.map(([k, m]) =>
    `<option value="${k}" ${k === key ? 'selected' : ''}>${m.title}</option>`).join('')}</select></label>
    <label>sort <select id="sort"><option value="name">by name</option><option value="value">by current value</option></select></label>
    <span id="count"></span></div><div id="agents"></div><div class="cluster"><div id="names"></div><div id="heat"></div></div>`;
  agentsTable(gen);
  $<HTMLSelectElement>('#metric').onchange = (e) => setView({ ...app.view, metric: (e.target as HTMLSelectElement).value });
  const [lo, hi] = rangeOf(app.view);
  const feed = new Feed(spec, stepFor(lo, hi));
  const frame = await getJson<Frame>(queryUrl(spec, selectorFor(spec, null), lo, hi));
  current(gen);
  feed.load(frame);
  const rows = feed.keys.length;
  const rowH = Math.max(3, Math.min(18, Math.floor(900 / Math.max(rows, 1))));
  const hm = new HeatMap($('#heat'), feed, spec.max, (i) => {
    const host = feed.defs[i].labels.host;
    if (host) setView({ view: 'host', host, range: app.view.range, from: app.view.from, to: app.view.to });
  }, rowH);
  $('#heat').title = definition(spec, {});
  const sortSel = $<HTMLSelectElement>('#sort');
  const names = $('#names');
  const targets = spec.by?.[0] === 'target';
  const sort = () => {
    // Rows come and go with the live stream: the count follows them.
    $('#count').textContent = targets
      ? `${feed.keys.length} SNMP targets · ${spec.title}`
      : `${feed.keys.length} hosts · ${spec.title} · click a row for its host`;
    const idx = [...Array(feed.keys.length).keys()];
    if (sortSel.value === 'value') {
      const cur = (i: number) => { const c = feed.columns.cols[i]; for (let k = c.length - 1; k >= 0; k--) if (c[k] !== null) return c[k]!; return -Infinity; };
      idx.sort((a, b) => cur(b) - cur(a));
    } else idx.sort((a, b) => feed.label(a).localeCompare(feed.label(b)));
    hm.order = idx;
    names.style.fontSize = `${Math.min(12, rowH)}px`;
    names.innerHTML = rowH >= 9 ? idx.map((i) => {
      const host = feed.defs[i].labels.host, v = host ? verdicts.get(host) : undefined;
      const dot = v ? `<i class="vd" style="background:${COLOURS[v.verdict] ?? '#bab0ac'}" title="${v.verdict} (${(v.confidence * 100).toFixed(0)} %)"></i>` : '';
      return `<div style="height:${rowH}px">${dot}${host ?? feed.defs[i].labels.target ?? feed.label(i)}</div>`;
    }).join('') : '';
  };
  // Each host's verdict over the last 10 s, beside its name.
  const verdicts = new Map<string, { verdict: string; confidence: number }>();
  const fetchVerdicts = async () => {
    let r: { hosts: { host: string; verdict: string; confidence: number }[] };
    try { r = await getJson('/api/v1/diagnosis/hosts?window=10s'); } catch { return; }
    if (gen !== app.generation) return;
    verdicts.clear();
    for (const h of r.hosts) if (h.verdict !== 'unknown') verdicts.set(h.host, h);
    stats.clusterVerdicts = verdicts.size;
    sort();
  };
  refresh(fetchVerdicts, 10000, true);
  sortSel.onchange = () => { sort(); hm.draw(); };
  sort();

  app.charts = [{ feed, plot: null, heat: hm, draw: () => hm.draw() }];
  hm.draw();
  subscribe(selectorFor(spec, null), [feed], () => { sort(); },
    (f, a, b, step) => getJson<Frame>(queryUrl(f.spec, selectorFor(f.spec, null), a, b, step)), hi);
  // Re-sort by value about once a second, not every frame.
  const t = setInterval(() => { if (sortSel.value === 'value') sort(); }, 1000);
  app.teardown.push(() => clearInterval(t));
}

export async function hostView(main: HTMLElement, host: string, gen: number): Promise<void> {
  const [lo, hi] = rangeOf(app.view);
  const core = app.view.core ?? '0';
  const specs = [...HOST_PANELS.slice(0, 1), coreModes(core), ...HOST_PANELS.slice(1)];
  main.innerHTML = `<div id="verdicts"></div><h2 class="heat-title">${CORE_HEAT.title} <small>(click a core for its modes)</small></h2><div id="cores" class="cores"></div>` +
    `<div id="processes"></div><div id="cgroups"></div><div id="profile"></div><div id="flame-wrap"><div id="flame"></div></div><div id="timeline"></div><div id="kernel"></div><div id="latency"></div><div id="loadruns"></div>` +
    `<div class="grid">${specs.map((s) => `<div class="panel" id="p-${s.id}"></div>`).join('')}</div>`;
  topSymbols(host, gen);
  flameGraph(host, gen);
  processTable(host, gen);
  cpuTimeline(host, gen);
  syscallTable(host, gen);
  latencyHeat(host, gen);
  verdictStrip(host, gen);
  loadRuns(gen);
  const step = stepFor(lo, hi);
  const feeds = specs.map((s) => new Feed(s, step));
  const coreFeed = new Feed(CORE_HEAT, step);
  const all = [coreFeed, ...feeds];
  const frames = await Promise.all(all.map((f) => getJson<Frame>(queryUrl(f.spec, selectorFor(f.spec, host), lo, hi))));
  current(gen);
  all.forEach((f, i) => f.load(frames[i]));
  stats.loadedCells = frames.reduce((n, fr) => n + fr.series.reduce((m, s) => m + s.values.filter((v) => v !== null).length, 0), 0);
  const build = () => {
    for (const c of app.charts) c.plot?.destroy();
    app.charts = [];
    $('#cores').replaceChildren();
    // Rows tall enough to name each core (a label needs 12 px) up to 16
    // cores; beyond, every other one is named.
    const rowH = coreFeed.keys.length <= 16 ? 14 : 8;
    const hm = new HeatMap($('#cores'), coreFeed, 100, (i) => setView({ ...app.view, core: coreFeed.defs[i].labels.cpu }, true), rowH,
      (i) => `CPU ${coreFeed.defs[i].labels.cpu}`);
    $('#cores').title = definition(CORE_HEAT, { host });
    hm.order = [...coreFeed.keys.keys()].sort((a, b) => +coreFeed.defs[a].labels.cpu - +coreFeed.defs[b].labels.cpu);
    app.charts.push({ feed: coreFeed, plot: null, heat: hm, draw: () => hm.draw() });
    feeds.forEach((f) => {
      const el = $(`#p-${f.spec.id}`);
      el.replaceChildren();
      if (f.keys.length === 0) { el.innerHTML = `<div class="empty">${f.spec.title}: no data on this host</div>`; return; }
      app.charts.push(lineChart(el, f));
    });
    redrawAll();
  };
  build();
  subscribe(unionSelector(all.map((f) => f.spec), host), all, build,
    (f, a, b, step) => getJson<Frame>(queryUrl(f.spec, selectorFor(f.spec, host), a, b, step)), hi);
}
