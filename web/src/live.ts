// The live stream (/api/v1/live, server-sent events): new series bound to
// the feeds, points pushed and drawn while following, gaps marked when the
// server says the client lagged.

import { redrawAll } from './charts';
import { Feed } from './feed';
import { app, following, rangeOf, stats } from './state';
import { SeriesDef } from './transform';

export function subscribe(match: string, feeds: Feed[], onGrow: () => void): void {
  app.live?.close();
  const es = new EventSource(`/api/v1/live?match=${encodeURIComponent(match)}`);
  app.live = es;
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
      const [lo] = rangeOf(app.view);
      for (const f of feeds) f.columns.trim(lo - f.columns.step);
      redrawAll();
      // uPlot commits in a microtask queued by setData; ours runs after it.
      queueMicrotask(() => {
        const now = performance.now();
        stats.frames.push(now - t0); if (stats.frames.length > 20000) stats.frames.splice(0, 10000);
        // The longest wait between two redraws (the benchmark's stall).
        if (stats.lastDrawAt > 0) stats.maxGapMs = Math.max(stats.maxGapMs, now - stats.lastDrawAt);
        stats.lastDrawAt = now;
      });
    }
  });
  es.addEventListener('lagged', () => { for (const f of feeds) f.gap(Date.now() / 1000); });
}
