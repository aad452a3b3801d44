// Load runs (`kansoku lab load URL --server …`): the generator's series
// per interval — responses, failures, latency p50/p99/max from the
// intended send — for every run in the view's range, beside the host's own
// charts (docs/load.md). They carry `run` and `db="lab"`, no host: the
// section shows every run whatever host is viewed, and only when one is in
// range. Drawn from /api/v1/query like the other charts and refreshed with
// the range (the live stream carries the host's series only).

import { getJson, queryUrl, selectorFor } from './api';
import { type Chart, lineChart } from './charts';
import { Feed, type Frame } from './feed';
import { app, rangeOf, refresh, stats, stepFor } from './state';
import { escHtml, type PanelSpec } from './transform';

export const LOAD_PANELS: PanelSpec[] = [
  { id: 'load-responses', title: 'Load runs: responses per interval', unit: 'count', names: ['load_responses'], by: ['run'] },
  { id: 'load-failures', title: 'Load runs: failures per interval', unit: 'count', names: ['load_failures'], by: ['run'] },
  // Microseconds stored; drawn in seconds for the axis's units.
  { id: 'load-latency', title: 'Load runs: latency from the intended send (p50, p99, max)', unit: 'seconds',
    names: ['load_p50_us', 'load_p99_us', 'load_max_us'], map: (v) => v / 1e6 },
];

export function loadRuns(gen: number): void {
  let charts: Chart[] = [];
  const draw = async () => {
    const [lo, hi] = rangeOf(app.view);
    const step = stepFor(lo, hi);
    const feeds = LOAD_PANELS.map((s) => new Feed(s, step));
    const frames = await Promise.all(feeds.map((f) => getJson<Frame>(queryUrl(f.spec, selectorFor(f.spec, null), lo, hi))));
    if (gen !== app.generation) return;
    const el = document.querySelector<HTMLElement>('#loadruns');
    if (!el) return;
    for (const c of charts) c.plot?.destroy();
    charts = [];
    feeds.forEach((f, i) => f.load(frames[i]));
    if (feeds[0].keys.length === 0) { el.replaceChildren(); stats.loadRuns = 0; return; }
    const runs = [...new Set(frames.flatMap((fr) => fr.series.map((s) => s.labels.run).filter(Boolean)))].sort();
    el.innerHTML = `<h2 class="heat-title">Load runs in range <small>(${runs.length}: ${runs.map(escHtml).join(', ')})</small></h2>` +
      `<div class="grid">${LOAD_PANELS.map((s) => `<div class="panel" id="p-${s.id}"></div>`).join('')}</div>`;
    for (const f of feeds) {
      const p = el.querySelector<HTMLElement>(`#p-${f.spec.id}`)!;
      if (f.keys.length === 0) { p.innerHTML = `<div class="empty">${f.spec.title}: none in range</div>`; continue; }
      charts.push(lineChart(p, f));
    }
    stats.loadRuns = runs.length;
  };
  app.teardown.push(() => { for (const c of charts) c.plot?.destroy(); });
  refresh(draw, 5000);
}
