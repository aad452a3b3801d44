// The live stream (/api/v1/live, server-sent events): new series bound to
// the feeds, points pushed and drawn while following, gaps marked when the
// server says the client lagged.

import { redrawAll } from './charts';
import { Feed, Frame } from './feed';
import { app, following, rangeOf, stats } from './state';
import { SeriesDef } from './transform';

/// `reload(feed, from, to, step)` asks the server for a feed's buckets;
/// `seam` is where the history just loaded ends (seconds).
export function subscribe(match: string, feeds: Feed[], onGrow: () => void,
  reload: (f: Feed, from: number, to: number, step: number) => Promise<Frame>, seam: number): void {
  app.live?.close();
  const es = new EventSource(`/api/v1/live?match=${encodeURIComponent(match)}`);
  app.live = es;
  // Seams the live points cannot fill exactly — the history's end (points
  // stored after its read, before the stream's first; the first rate
  // after a bind) and a stretch the stream lagged through — are asked of
  // the server once the live tail is well past them (so the buckets
  // replaced are complete and no live point lands in them again).
  const seams: number[] = [seam];
  const mend = (s: number, t: number) => {
    stats.repairsDue += feeds.length;
    for (const f of feeds) {
      const step = f.columns.step;
      const end = Math.floor(t / step) * step - step;
      reload(f, s - 3 * step, end, step).then((frame) => {
        if (es !== app.live) return;
        // Neither the rates' lead-in nor the answer's last bucket (its `to`).
        f.repair({ ...frame, times: frame.times.slice(0, -1), series: frame.series.map((x) => ({ ...x, values: x.values.slice(0, -1) })) }, s - step);
        redrawAll();
      }, () => { /* kept as drawn */ }).finally(() => { stats.repairs++; });
    }
  };
  es.addEventListener('series', (e) => {
    const list = (JSON.parse((e as MessageEvent).data) as { series: SeriesDef[] }).series;
    let grew = false;
    for (const f of feeds) grew = f.bind(list) || grew;
    if (grew) onGrow();
  });
  es.addEventListener('points', (e) => {
    const t0 = performance.now();
    const data = (e as MessageEvent).data as string;
    const p = JSON.parse(data) as { t: number; values: (number | null)[] };
    // `t_ns` read from the text: as a JSON number it would round to 256 ns.
    const m = /"t_ns":(-?\d+)/.exec(data);
    const ns = m ? BigInt(m[1]) : undefined;
    for (const f of feeds) f.push(p.t, p.values, ns);
    stats.updates++; stats.lastT = p.t;
    const margin = Math.max(2, 3 * Math.max(...feeds.map((f) => f.columns.step)));
    while (seams.length > 0 && p.t >= seams[0] + margin) mend(seams.shift()!, p.t);
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
  es.addEventListener('lagged', () => {
    const t = Date.now() / 1000;
    for (const f of feeds) f.gap(t);
    seams.push(t - 5);
  });
}
