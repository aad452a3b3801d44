// The dashboard's state, in one place: the view (from the URL), whether
// following live is paused, the live stream, the charts drawn, what to undo
// when the view changes, the render generation, and the sampling interval.
// Every module reads and writes it here; nothing else is global.

import type { Band } from './alerts';
import type { Mark } from './marks';
import type { Chart } from './charts';
import { RANGES, View, formatView, parseView } from './transform';

export const POINTS = 600; // history buckets per chart
export const $ = <T extends HTMLElement>(sel: string) => document.querySelector(sel) as T;

/// Measurements for the browser benchmark and the e2e test.
export const stats = { updates: 0, frames: [] as number[], lastT: 0, lastDrawAt: 0, maxGapMs: 0, renders: 0, errors: [] as string[], loadedCells: 0, alertsShown: 0, bandsDrawn: 0, kernelRows: 0, verdicts: 0, latencyRows: 0, clusterVerdicts: 0, diskMaps: 0, processRows: 0, cgroupRows: 0, loadRuns: 0, marksDrawn: 0, heatMarks: 0, markReasons: [] as string[], repairs: 0, repairsDue: 0, flameComplete: false,
  latency: null as null | { query: string; asked: string; bounds: string[]; times: number[]; cells: (number | null)[][] } };
(window as unknown as { __kansoku: typeof stats }).__kansoku = stats;

export const app = {
  view: parseView(location.hash) as View,
  paused: false,
  live: null as EventSource | null,
  teardown: [] as (() => void)[],
  /// Bumped by every render: a view whose data arrives after the user moved
  /// on must not touch the new view's DOM.
  generation: 0,
  charts: [] as Chart[],
  /// The sampling interval (from /api/v1/status): buckets finer than it
  /// would hold at most one sample each and draw every point as an island.
  interval: 0.1,
  /// Spans during which an alert fired (alerts.ts), shaded on the charts.
  alertBands: [] as Band[],
  /// Intervals in which something was lost (marks.ts), marked on the charts.
  dropMarks: [] as Mark[],
  /// Draws the current view (set by main.ts).
  render: (): void => {},
  /// Zooms the flame graph into a program's processes (set by profile.ts).
  focusFlame: (_program: string): void => {},
};

// The browser test reads the charts' columns (every number true: a share
// of the cores is checked against its bound).
(window as unknown as { __kansokuApp: typeof app }).__kansokuApp = app;

export class Superseded extends Error {}

/// Runs `draw` now, then again after each run finishes — while the view
/// follows live unless `always` — until the view changes: never a request
/// while the same one is still running (issue 44: a flame graph taking 5.9 s
/// was asked for every 2 s). A range-wide table or picture is asked for
/// again every `ms`, or every thirtieth of the range if longer (up to a
/// minute): over 15 minutes, 30 s more of data changes it by 3 %, and the
/// host view's sections together stay within 3 % of a core.
///
/// A `draw` that answers `'again'` (a flame graph named only in part) is run
/// again at once, its time not counted as an answer's.
export function refresh(draw: () => Promise<void | 'again'>, ms: number, always = false): void {
  let stopped = false, timer = 0, took = 0;
  // And never sooner than 30 times what the last answer took: a section
  // keeps the server busy at most ~3 % of the time it is open.
  const wait = () => {
    if (always) return ms;
    const [lo, hi] = rangeOf(app.view);
    return Math.max(ms, Math.min(60000, ((hi - lo) * 1000) / 30), Math.min(300000, 30 * took));
  };
  const run = async () => {
    const t0 = performance.now();
    let again = false;
    try { again = (await draw()) === 'again'; } catch { /* the next run tries again */ }
    if (!again) took = performance.now() - t0;
    if (!stopped) timer = again ? window.setTimeout(run, 0) : window.setTimeout(tick, wait());
  };
  const tick = () => { if (always || app.view.from === undefined) run(); else timer = window.setTimeout(tick, wait()); };
  run();
  app.teardown.push(() => { stopped = true; clearTimeout(timer); });
}
export function current(gen: number): void { if (gen !== app.generation) throw new Superseded(); }

export function rangeOf(v: View): [number, number] {
  if (v.from !== undefined && v.to !== undefined) return [v.from, v.to];
  const now = Date.now() / 1000;
  return [now - RANGES[v.range], now];
}
export const following = () => app.view.from === undefined && !app.paused;
export const stepFor = (from: number, to: number) => Math.max((to - from) / POINTS, app.interval);

export function setView(next: View, replace = false): void {
  app.view = next;
  const h = formatView(app.view);
  if (replace) history.replaceState(null, '', h); else history.pushState(null, '', h);
  app.render();
}
