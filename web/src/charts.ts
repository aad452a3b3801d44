// Line charts (uPlot) of a feed: stacked or not, zoom by drag or wheel,
// pan with shift+wheel; every chart redrawn from its feed on each update.

import uPlot from 'uplot';
import { drawBands } from './alerts';
import { Feed } from './feed';
import { drawMarks } from './marks';
import type { HeatMap } from './heatmap';
import { app, rangeOf, setView, stats } from './state';
import { MIN_TOP, definition, fmt, stack } from './transform';

export function css(name: string): string { return getComputedStyle(document.body).getPropertyValue(name).trim(); }

export interface Chart { feed: Feed; plot: uPlot | null; heat?: HeatMap; draw(): void }

function palette(i: number): string {
  const c = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
  return c[i % c.length];
}

export function lineChart(el: HTMLElement, feed: Feed): Chart {
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
  const [a, b] = rangeOf(app.view);
  const axis = { stroke: css('--fg2'), grid: { stroke: css('--grid'), width: 1 }, ticks: { stroke: css('--grid') } };
  const opts: uPlot.Options = {
    title: spec.title, width: (el.clientWidth || 600) - 8, height: 220,
    cursor: { sync: { key: 'x' }, drag: { x: true, y: false, setScale: false } },
    // Tall enough that a flat zero line's ticks read apart (0, 2, 4… B/s),
    // not five labels all reading "0 B/s".
    scales: { x: { time: true, min: a, max: b }, y: { range: (_u, lo, hi) => [Math.min(0, lo), Math.max(hi, MIN_TOP[spec.unit])] } },
    // The value axis as wide as its longest label (issue 44: "763 MiB/s"
    // lost its first digit in a fixed 70 px).
    axes: [axis, { ...axis, size: (_u, values) => labelWidth(values), values: (_u, ticks) => ticks.map((t) => fmt(t, spec.unit)) }],
    series,
    hooks: {
      drawClear: [drawBands],
      draw: [drawMarks],
      setSelect: [(u) => {
        if (u.select.width < 4) return;
        const from = u.posToVal(u.select.left, 'x'), to = u.posToVal(u.select.left + u.select.width, 'x');
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        setView({ ...app.view, from, to });
      }],
    },
  };
  const plot = new uPlot(opts, data(), el);
  // Its title's tooltip: the query the chart is.
  plot.root.querySelector('.u-title')?.setAttribute('title', definition(spec, app.view.host ? { host: app.view.host } : {}));
  // Wheel: zoom around the cursor; shift+wheel: pan.
  plot.over.addEventListener('wheel', (e) => {
    e.preventDefault();
    const [lo, hi] = rangeOf(app.view);
    if (e.shiftKey) { const d = (hi - lo) * 0.2 * Math.sign(e.deltaY); setView({ ...app.view, from: lo + d, to: hi + d }, true); return; }
    const at = plot.posToVal(e.offsetX, 'x'), f = e.deltaY > 0 ? 1.25 : 0.8;
    setView({ ...app.view, from: at - (at - lo) * f, to: at + (hi - at) * f }, true);
  }, { passive: false });
  return {
    feed, plot,
    draw() {
      const [lo, hi] = rangeOf(app.view);
      plot.batch(() => { plot.setData(data(), false); plot.setScale('x', { min: lo, max: hi }); });
    },
  };
}

export function redrawAll(): void {
  for (const c of app.charts) c.draw();
  stats.renders++;
}

const measure = document.createElement('canvas').getContext('2d')!;

/// Room for a value axis's labels: the widest in uPlot's axis font, plus
/// the tick and gap.
function labelWidth(values: string[] | null): number {
  if (!values?.length) return 50;
  measure.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif';
  return Math.ceil(Math.max(...values.map((v) => measure.measureText(v).width))) + 22;
}
