// Axes and colour scales for the pictures drawn on canvases (heat maps,
// the verdict strip): DOM labels beside the canvas, so every picture a
// person reads has units, a time axis where it spans time, and a scale
// where colour carries a value (issue 44). The browser test finds them by
// their classes.

import { heat, timeTicks } from './transform';

/// A time axis under a picture spanning [lo, hi] seconds, `width` px wide.
export function timeAxis(lo: number, hi: number, width: number): string {
  const ticks = timeTicks(lo, hi, Math.max(2, Math.floor(width / 90)));
  return `<div class="axis-x">${ticks.map(({ t, label }) =>
    `<span class="tick" style="left:${(((t - lo) / (hi - lo)) * 100).toFixed(3)}%">${label}</span>`).join('')}</div>`;
}

/// A vertical axis beside a picture `height` px tall: labels at `at`, from
/// 0 (top) to 1 (bottom).
export function valueAxis(ticks: { at: number; label: string }[], title: string, height: number): string {
  return `<div class="axis-y" title="${title}" style="height:${height}px">${ticks.map(({ at, label }) =>
    `<span class="tick" style="top:${(at * 100).toFixed(3)}%">${label}</span>`).join('')}</div>`;
}

/// The heat colours as a CSS gradient, low to high.
const RAMP = `linear-gradient(to right, ${[0, 0.25, 0.5, 0.75, 1].map((x) => `rgb(${heat(x).join(',')}) ${x * 100}%`).join(', ')})`;

/// A colour scale: what the colours mean, from `labels[0]` (lowest) to the
/// last (highest), evenly spaced along the ramp.
export function colourScale(title: string, labels: string[]): string {
  return `<div class="colour-scale"><span class="scale-title">${title}</span><span class="ramp-wrap"><span class="ramp" style="background:${RAMP}"></span>` +
    `<span class="scale-ticks">${labels.map((l, i) => `<span class="tick" style="left:${(i / Math.max(1, labels.length - 1)) * 100}%">${l}</span>`).join('')}</span></span></div>`;
}
