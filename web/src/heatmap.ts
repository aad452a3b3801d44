// Heat maps: rows x time buckets drawn from one ImageData, one pixel per
// cell scaled up without smoothing; a tooltip per cell, a click per row.

import { colourScale, timeAxis, valueAxis } from './axes';
import { Feed } from './feed';
import { targetMarks } from './marks';
import { $, POINTS, rangeOf, app, stats } from './state';
import { fmt, heat } from './transform';

/// 256 heat colours as little-endian RGBA words, for one store per cell.
const LUT = new Uint32Array(256).map((_, i) => {
  const [r, g, b] = heat(i / 255);
  return (255 << 24 | b << 16 | g << 8 | r) >>> 0;
});

/// Rows x time buckets drawn from one ImageData (one pixel per cell, scaled
/// up without smoothing): a full redraw costs rows x buckets writes, no paths.
export class HeatMap {
  canvas = document.createElement('canvas');
  private img: ImageData | null = null;
  private off: OffscreenCanvas | null = null;
  order: number[] = [];
  /// The time axis under the map and the colour scale under that.
  private axis = document.createElement('div');
  private scale = document.createElement('div');
  /// Row names left of the map (when `rowLabel` is given).
  private rows = document.createElement('div');
  private body = document.createElement('div');
  private drawn = { lo: NaN, W: 0, max: NaN, rows: '' };
  constructor(private host: HTMLElement, private feed: Feed, private max: number | undefined, private onRow: (i: number) => void,
    private rowH: number, private rowLabel?: (i: number) => string) {
    const row = document.createElement('div');
    row.className = 'plot-row';
    this.body.className = 'plot-body';
    this.body.append(this.canvas, this.axis);
    this.rows.style.flex = 'none';
    if (rowLabel) row.append(this.rows);
    row.append(this.body);
    host.append(row, this.scale);
    this.canvas.onclick = (e) => { const r = Math.floor(e.offsetY / this.rowH); if (r < this.order.length) this.onRow(this.order[r]); };
    this.canvas.onmousemove = (e) => this.tip(e);
    this.canvas.onmouseleave = () => { $('#tip').style.display = 'none'; };
  }
  bucketAt(x: number): number {
    const [lo, hi] = rangeOf(app.view), t = lo + (x / this.canvas.clientWidth) * (hi - lo);
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
    const target = this.feed.defs[i]?.labels.target;
    const lost = target ? targetMarks(target, this.feed.columns.times).get(k) ?? [] : [];
    tip.textContent = `${this.feed.label(i)}  ${new Date(this.feed.columns.times[k] * 1000).toLocaleTimeString()}  ${v === null ? 'no data' : fmt(v, this.feed.spec.unit)}` +
      lost.map((w) => `\n${w}`).join('');
  }
  draw(): void {
    const cols = this.feed.columns.cols, times = this.feed.columns.times, rows = this.order.length;
    const [lo, hi] = rangeOf(app.view);
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
    const W = this.body.clientWidth || this.host.clientWidth || 800, H = rows * this.rowH;
    if (this.canvas.width !== W || this.canvas.height !== H) { this.canvas.width = W; this.canvas.height = H; }
    if (!this.off || this.off.width !== w || this.off.height !== Math.max(rows, 1)) this.off = new OffscreenCanvas(w, Math.max(rows, 1));
    this.off.getContext('2d')!.putImageData(this.img, 0, 0);
    const ctx = this.canvas.getContext('2d')!;
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, W, H);
    ctx.drawImage(this.off, 0, 0, W, H);
    this.drawMarks(ctx, W, lo, span);
    this.decorate(lo, hi, W, max);
  }
  /// The time axis and colour scale, redrawn when the range has moved a
  /// pixel or the scale changed.
  private decorate(lo: number, hi: number, W: number, max: number): void {
    const d = this.drawn;
    const names = this.rowLabel ? this.order.map((i) => this.rowLabel!(i)).join('\n') : '';
    if (W === d.W && max === d.max && names === d.rows && Math.abs(lo - d.lo) < (hi - lo) / W) return;
    this.drawn = { lo, W, max, rows: names };
    if (this.rowLabel) {
      // Every row named where they are tall enough, else about every 12 px.
      const every = Math.max(1, Math.ceil(12 / this.rowH)), n = this.order.length;
      this.rows.innerHTML = valueAxis(this.order.flatMap((i, r) => (r % every ? [] : [{ at: (r + 0.5) / n, label: this.rowLabel!(i) }])), 'rows', n * this.rowH);
    }
    this.axis.innerHTML = timeAxis(lo, hi, W);
    const unit = this.feed.spec.unit;
    this.scale.innerHTML = colourScale(`colour: ${this.feed.spec.title}`, [0, max / 2, max].map((v) => fmt(v, unit)));
  }
  /// A dot on each cell of an SNMP target's row in which it was silent or
  /// answered stale values (marks.ts); the tooltip says which.
  private drawMarks(ctx: CanvasRenderingContext2D, W: number, lo: number, span: number): void {
    const times = this.feed.columns.times, cell = Math.max(2, W * this.feed.columns.step / span);
    ctx.fillStyle = '#e15759';
    for (let r = 0; r < this.order.length; r++) {
      const target = this.feed.defs[this.order[r]]?.labels.target;
      if (!target) continue;
      for (const k of targetMarks(target, times).keys()) {
        const x = ((times[k] - lo) / span) * W + cell / 2, y = r * this.rowH + this.rowH / 2;
        ctx.beginPath();
        ctx.arc(x, y, Math.max(1.5, Math.min(this.rowH, cell) / 3), 0, 2 * Math.PI);
        ctx.fill();
        stats.heatMarks++;
      }
    }
  }
}
