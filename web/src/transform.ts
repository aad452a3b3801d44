// Pure data transforms between the API's columnar frames / live events and
// uPlot's aligned data. No DOM here: unit-tested under node (test/).

export type Labels = Record<string, string>;
export interface SeriesDef { name: string; labels: Labels }

/// What one chart shows: which series, whether counters become rates, and how
/// series combine (the same `by`/`group` the query API applies server-side).
export interface PanelSpec {
  id: string;
  title: string;
  unit: Unit;
  names: string[];
  /// label -> exact value, or "!value" to exclude one value.
  labels?: Labels;
  rate?: boolean;
  by?: string[];
  group?: 'sum' | 'avg';
  /// Each group as its share of all groups' sum at the same time (after
  /// rate and grouping, before map): CPU modes as a share of all CPU time,
  /// as top and mpstat compute them — bounded by 1 whatever the jitter of
  /// the reads' times (issue 44: a late read put the stack at 190 %).
  share?: boolean;
  /// Applied to every value after rate, grouping and share (e.g. idle -> busy %).
  map?: (v: number) => number;
  /// The map in words, for the chart's definition (`definition`).
  mapText?: string;
  stacked?: boolean;
}

export type Unit = 'percent' | 'bytes' | 'bytes/s' | 'count' | 'seconds' | 'ratio';

export function matches(spec: PanelSpec, s: SeriesDef): boolean {
  if (!spec.names.includes(s.name)) return false;
  for (const [k, want] of Object.entries(spec.labels ?? {})) {
    const have = s.labels[k];
    if (want.startsWith('!') ? have === want.slice(1) : have !== want) return false;
  }
  return true;
}

/// The series a group of `by` labels maps to: name plus only those labels.
export function groupKey(s: SeriesDef, by: string[] | undefined): string {
  if (!by) return seriesKey(s);
  const parts = by.filter((b) => b in s.labels).sort().map((b) => `${b}="${s.labels[b]}"`);
  return `${s.name}{${parts.join(',')}}`;
}

export function seriesKey(s: SeriesDef): string {
  const parts = Object.keys(s.labels).sort().map((k) => `${k}="${s.labels[k]}"`);
  return `${s.name}{${parts.join(',')}}`;
}

/// The selector sent to /api/v1/query for a panel on one host.
export function selector(spec: PanelSpec, host: Labels): string {
  const m: string[] = [];
  m.push(spec.names.length === 1 ? `__name__="${spec.names[0]}"` : `__name__=~"${spec.names.join('|')}"`);
  for (const [k, v] of Object.entries({ ...host, ...(spec.labels ?? {}) })) {
    m.push(v.startsWith('!') ? `${k}!="${v.slice(1)}"` : `${k}="${v}"`);
  }
  return `{${m.join(',')}}`;
}

/// What a panel draws, as the query that defines it (the chart's tooltip;
/// docs/dashboard.md): /api/v1/query's parameters, then what the page
/// does to its answer (`share`, then the panel's `map`, described by its
/// `mapText`). The Chromium test holds every chart to this query.
export function definition(spec: PanelSpec, host: Labels): string {
  const mapText = spec.mapText;
  const p = [`query=${selector(spec, host)}`];
  if (spec.rate) p.push('rate=true');
  if (spec.by) p.push(`by=${spec.by.join(',')}`, `group=${spec.group ?? 'sum'}`);
  const then = [spec.share ? `each ${spec.by?.join(',') ?? 'series'} as its share of their sum` : '', mapText ?? ''].filter(Boolean);
  return `/api/v1/query?${p.join('&')}&step=S` + (then.length ? `, then ${then.join(', then ')}` : '');
}

/// One selector for the live stream of several panels: the host and every
/// name they draw (each feed keeps its own label filters), so a view
/// subscribes to what it shows, not to every series of the host (issue
/// 44: `{host="vm"}` was 14,923 series at 10 Hz, ~1.5 MB/s).
export function unionSelector(specs: PanelSpec[], host: string): string {
  const names = [...new Set(specs.flatMap((s) => s.names))].sort();
  const esc = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  return `{__name__=~"${names.join('|')}",host="${esc(host)}"}`;
}

/// Per-second rates of cumulative counters between consecutive live points;
/// a decrease is a reset and counts from zero (as the server's rate=true).
export class Rater {
  private prevT: number[] = [];
  private prevNs: (bigint | null)[] = [];
  private prev: (number | null)[] = [];
  /// Rates at time `t` (seconds) for `values`, each against the series'
  /// own previous value (a series read once a second beside 100 ms ones
  /// has a rate once a second, as the server computes it); null where a
  /// series has no value now or none before. With `ns`, the exact time
  /// (the live stream's `t_ns`), the interval is taken from it as the
  /// server takes it: a float second near 1.8e9 is off by up to 240 ns,
  /// 2e-6 of a 100 ms interval.
  next(t: number, values: (number | null)[], ns?: bigint): (number | null)[] {
    return values.map((v, i) => {
      if (v === null || v === undefined) return null;
      const p = this.prev[i], pns = this.prevNs[i];
      const dt = ns !== undefined && pns !== undefined && pns !== null ? Number(ns - pns) / 1e9 : t - (this.prevT[i] ?? NaN);
      this.prev[i] = v; this.prevT[i] = t; this.prevNs[i] = ns ?? null;
      if (p === null || p === undefined || !(dt > 0)) return null;
      return (v >= p ? v - p : v) / dt;
    });
  }
  /// Forget the previous points (after a gap the next rate would span it).
  reset(): void { this.prevT = []; this.prevNs = []; this.prev = []; }
}

/// Combines member values into groups: `members[g]` lists indexes into `values`.
export function combine(values: (number | null)[], members: number[][], op: 'sum' | 'avg'): (number | null)[] {
  return members.map((idx) => {
    let sum = 0, n = 0;
    for (const i of idx) {
      const v = values[i];
      if (v !== null && v !== undefined && Number.isFinite(v)) { sum += v; n++; }
    }
    if (n === 0) return null;
    return op === 'avg' ? sum / n : sum;
  });
}

/// Each value as its share of the non-null values' sum (null where the sum
/// is not positive).
export function shares(values: (number | null)[]): (number | null)[] {
  let total = 0;
  for (const v of values) if (v !== null && Number.isFinite(v)) total += v;
  return values.map((v) => (v === null || !(total > 0) ? null : v / total));
}

/// Shares of every column at each time (columns: one array per series).
export function shareColumns(cols: (number | null)[][]): (number | null)[][] {
  const n = cols.reduce((m, c) => Math.max(m, c.length), 0);
  const out = cols.map(() => new Array<number | null>(n).fill(null));
  for (let j = 0; j < n; j++) {
    const at = shares(cols.map((c) => c[j] ?? null));
    at.forEach((v, i) => { out[i][j] = v; });
  }
  return out;
}

/// Live columns for one chart: bucketed to the history's resolution so the
/// point count (and memory) stays flat however long the page stays open;
/// a bucket with no data becomes a gap (null), never an interpolation.
export class Columns {
  times: number[] = [];
  cols: (number | null)[][] = [];
  private counts: number[][] = [];
  constructor(public step: number, n: number) {
    for (let i = 0; i < n; i++) { this.cols.push([]); this.counts.push([]); }
  }
  /// Adds a column (a new series) filled with gaps.
  addSeries(): number {
    this.cols.push(this.times.map(() => null));
    this.counts.push(this.times.map(() => 0));
    return this.cols.length - 1;
  }
  /// Loads history: bucket starts and one array per series.
  load(times: number[], cols: (number | null)[][]): void {
    this.times = times.slice();
    this.cols = cols.map((c) => c.slice());
    this.counts = cols.map((c) => c.map((v) => (v === null ? 0 : 1)));
  }
  /// Adds a point at `t` seconds: averaged into the last bucket if `t` falls
  /// in it, else a new bucket; a skipped bucket is recorded as a gap. With
  /// `ns` (the exact time) the bucket is the server's: a point on a bucket's
  /// edge (the collector's rounds are) lands where /api/v1/query puts it,
  /// whatever the float seconds round to.
  push(t: number, values: (number | null)[], ns?: bigint): void {
    const b = ns !== undefined ? bucketStart(ns, this.step) : Math.floor(t / this.step) * this.step;
    const last = this.times.length - 1;
    if (last >= 0 && b <= this.times[last] + 1e-9) {
      if (b < this.times[last] - 1e-9) return; // older than the tail: already covered by history
      for (let i = 0; i < this.cols.length; i++) {
        const v = values[i];
        if (v === null || v === undefined) continue;
        const n = this.counts[i][last];
        const old = this.cols[i][last];
        this.cols[i][last] = old === null || n === 0 ? v : (old * n + v) / (n + 1);
        this.counts[i][last] = n + 1;
      }
      return;
    }
    if (last >= 0 && b - this.times[last] > 1.5 * this.step) {
      this.times.push(this.times[last] + this.step);
      for (let i = 0; i < this.cols.length; i++) { this.cols[i].push(null); this.counts[i].push(0); }
    }
    this.times.push(b);
    for (let i = 0; i < this.cols.length; i++) {
      const v = values[i];
      this.cols[i].push(v ?? null);
      this.counts[i].push(v === null || v === undefined ? 0 : 1);
    }
  }
  /// Puts `times`' buckets (ascending, on this step) in place of what the
  /// columns hold over the same span: the server's answer for a stretch
  /// the live points could not fill exactly (see Feed.repair). `cols[i]`
  /// absent: the series has no value there.
  replace(times: number[], cols: ((number | null)[] | undefined)[]): void {
    if (times.length === 0) return;
    const lo = times[0] - this.step / 2, hi = times[times.length - 1] + this.step / 2;
    let a = 0;
    while (a < this.times.length && this.times[a] < lo) a++;
    let b = a;
    while (b < this.times.length && this.times[b] < hi) b++;
    this.times.splice(a, b - a, ...times);
    for (let i = 0; i < this.cols.length; i++) {
      const c = cols[i] ?? times.map(() => null);
      this.cols[i].splice(a, b - a, ...c);
      this.counts[i].splice(a, b - a, ...c.map((v) => (v === null ? 0 : 1)));
    }
  }
  /// A gap at `t` (the server said points were missed).
  gap(t: number): void {
    this.times.push(t);
    for (let i = 0; i < this.cols.length; i++) { this.cols[i].push(null); this.counts[i].push(0); }
  }
  /// Drops buckets before `minT` so the window slides with time.
  trim(minT: number): void {
    let k = 0;
    while (k < this.times.length && this.times[k] < minT) k++;
    if (k === 0) return;
    this.times.splice(0, k);
    for (const c of this.cols) c.splice(0, k);
    for (const c of this.counts) c.splice(0, k);
  }
  /// uPlot's layout: [times, ...series].
  data(): (number | null)[][] { return [this.times, ...this.cols]; }
}

/// The start (seconds) of the bucket of `step` seconds holding the time
/// `ns`, buckets starting at multiples of the step since the epoch — as
/// the server's Bucketer, in integers.
export function bucketStart(ns: bigint, step: number): number {
  const s = BigInt(Math.round(step * 1e9));
  let q = ns / s;
  if (ns < 0n && q * s !== ns) q -= 1n;
  return Number(q * s) / 1e9;
}

/// Running sums for a stacked area chart: series i becomes the sum of 0..i.
export function stack(cols: (number | null)[][]): (number | null)[][] {
  const out: (number | null)[][] = [];
  let acc: (number | null)[] | null = null;
  for (const c of cols) {
    const next: (number | null)[] = c.map((v, j) => {
      const below: number | null = acc ? acc[j] : null;
      if (v === null) return below; // nothing here: the band below shows through, a gap stays a gap
      return (below ?? 0) + v;
    });
    out.push(next);
    acc = next;
  }
  return out;
}

/// The dashboard's state as it appears in the URL's hash, so a view can be
/// shared: `#view=host&host=vm&range=15m` or with `from`/`to` (seconds).
export interface View {
  view: 'cluster' | 'host' | 'disk';
  host?: string;
  /// The disk view: the path scanned and the two maps compared (ns).
  path?: string;
  before?: string;
  after?: string;
  zoom?: string;
  range: string;
  from?: number;
  to?: number;
  metric?: string;
  core?: string;
}

export const RANGES: Record<string, number> = { '1m': 60, '5m': 300, '15m': 900, '1h': 3600, '24h': 86400 };

/// The shortest range that shows `span` seconds of data (the default, 15m,
/// when it is unknown): a dashboard opened a minute after the start shows
/// that minute across the charts, not in their right 7 % (issue 44).
export function fitRange(span: number | null): string {
  if (span === null || !(span > 0)) return '15m';
  return Object.entries(RANGES).find(([, s]) => s >= span)?.[0] ?? '24h';
}

/// How many seconds of data a frame holds: from its first non-null bucket
/// to its end (null when none).
export function dataSpan(times: number[], series: { values: (number | null)[] }[], end: number): number | null {
  const first = times.findIndex((_, k) => series.some((s) => s.values[k] !== null));
  return first < 0 ? null : end - times[first];
}

export function parseView(hash: string): View {
  const p = new URLSearchParams(hash.replace(/^#/, ''));
  const num = (k: string) => { const v = p.get(k); return v !== null && v !== '' && Number.isFinite(+v) ? +v : undefined; };
  const range = p.get('range') ?? '';
  const view: View = {
    view: p.get('view') === 'host' && p.get('host') ? 'host' : p.get('view') === 'disk' ? 'disk' : 'cluster',
    range: range in RANGES ? range : '15m',
  };
  const host = p.get('host'); if (host) view.host = host;
  const from = num('from'), to = num('to');
  if (from !== undefined && to !== undefined && from < to) { view.from = from; view.to = to; view.range = 'custom'; }
  const metric = p.get('metric'); if (metric) view.metric = metric;
  const core = p.get('core'); if (core) view.core = core;
  for (const k of ['path', 'before', 'after', 'zoom'] as const) { const v = p.get(k); if (v) view[k] = v; }
  return view;
}

export function formatView(v: View): string {
  const p = new URLSearchParams();
  p.set('view', v.view);
  if (v.host) p.set('host', v.host);
  if (v.from !== undefined && v.to !== undefined) { p.set('from', v.from.toFixed(3)); p.set('to', v.to.toFixed(3)); }
  else p.set('range', v.range);
  if (v.metric) p.set('metric', v.metric);
  if (v.core) p.set('core', v.core);
  for (const k of ['path', 'before', 'after', 'zoom'] as const) if (v[k]) p.set(k, v[k]!);
  return '#' + p.toString();
}

const BIN = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/// A value with its unit, short enough for an axis tick.
/// The least top of a value axis, per unit: ticks of a fifth of it still
/// read apart as `fmt` writes them (a flat zero line once had five labels
/// all reading "0 B/s").
export const MIN_TOP: Record<Unit, number> = { percent: 1, bytes: 10, 'bytes/s': 10, count: 1, seconds: 1e-5, ratio: 0.01 };

export function fmt(v: number | null | undefined, unit: Unit): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  switch (unit) {
    case 'percent': return `${v.toFixed(Math.abs(v) < 10 ? 1 : 0)} %`;
    case 'ratio': return `${(v * 100).toFixed(1)} %`;
    case 'seconds': return v < 1e-3 ? `${(v * 1e6).toFixed(0)} µs` : v < 1 ? `${(v * 1e3).toFixed(1)} ms` : `${v.toFixed(2)} s`;
    case 'bytes': case 'bytes/s': {
      let i = 0, x = Math.abs(v);
      while (x >= 1024 && i < BIN.length - 1) { x /= 1024; i++; }
      const s = `${(Math.sign(v) * x).toFixed(x < 10 && i > 0 ? 1 : 0)} ${BIN[i]}`;
      return unit === 'bytes/s' ? s + '/s' : s;
    }
    default: {
      const a = Math.abs(v);
      if (a >= 1e9) return `${(v / 1e9).toFixed(1)} G`;
      if (a >= 1e6) return `${(v / 1e6).toFixed(1)} M`;
      if (a >= 1e3) return `${(v / 1e3).toFixed(1)} k`;
      return a >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(2);
    }
  }
}

/// Heat map colour for a value in 0..1 (dark blue -> teal -> yellow -> red);
/// null (no data) is drawn by the caller as background, never as a colour.
/// Round times (seconds) for a time axis over [lo, hi]: the finest step of
/// 1 s … 1 d that gives at most `most` ticks, and each tick's label (with
/// seconds when the step is under a minute). Local time, as the charts.
export function timeTicks(lo: number, hi: number, most: number): { t: number; label: string }[] {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const span = hi - lo;
  if (!(span > 0) || most < 1) return [];
  const step = steps.find((s) => span / s <= most) ?? Math.ceil(span / most / 86400) * 86400;
  // Round in local time: a 1-hour step lands on the hour where the user is.
  const offset = -new Date(lo * 1000).getTimezoneOffset() * 60;
  const out: { t: number; label: string }[] = [];
  for (let t = Math.ceil((lo + offset) / step) * step - offset; t <= hi; t += step) {
    const d = new Date(t * 1000), two = (n: number) => String(n).padStart(2, '0');
    const hm = `${two(d.getHours())}:${two(d.getMinutes())}`;
    out.push({ t, label: step < 60 ? `${hm}:${two(d.getSeconds())}` : step >= 86400 ? `${d.getMonth() + 1}/${d.getDate()}` : hm });
  }
  return out;
}

export function heat(x: number): [number, number, number] {
  const stops: [number, number, number, number][] = [
    [0, 20, 30, 70], [0.35, 20, 140, 150], [0.7, 240, 200, 40], [1, 220, 40, 30],
  ];
  const t = Math.min(1, Math.max(0, x));
  for (let i = 1; i < stops.length; i++) {
    const [t1, r1, g1, b1] = stops[i], [t0, r0, g0, b0] = stops[i - 1];
    if (t <= t1) {
      const f = (t - t0) / (t1 - t0);
      return [Math.round(r0 + f * (r1 - r0)), Math.round(g0 + f * (g1 - g0)), Math.round(b0 + f * (b1 - b0))];
    }
  }
  return [220, 40, 30];
}

// Latency heat maps (latency.ts): one histogram's cumulative buckets over time.
export interface Grid {
  /// Upper bounds (s) of the rows, ascending; the last may be Infinity.
  bounds: number[];
  times: number[];
  /// [row][time]: events a second in the bucket (null: no data).
  cells: (number | null)[][];
  max: number;
}

/// Cumulative `le` series (Prometheus matrix rows) → per-bucket rates,
/// rows without any event dropped.
export function latencyGrid(series: { metric: Record<string, string>; values: [number, string][] }[]): Grid {
  const byLe = series
    .map((s) => ({ le: s.metric.le === '+Inf' ? Infinity : Number(s.metric.le), pts: new Map(s.values.map(([t, v]) => [t, Number(v)])) }))
    .filter((s) => !Number.isNaN(s.le))
    .sort((a, b) => a.le - b.le);
  const times = [...new Set(series.flatMap((s) => s.values.map(([t]) => t)))].sort((a, b) => a - b);
  const rows: { le: number; cells: (number | null)[] }[] = byLe.map((s, i) => ({
    le: s.le,
    cells: times.map((t) => {
      const v = s.pts.get(t);
      if (v === undefined) return null;
      const below = i > 0 ? byLe[i - 1].pts.get(t) ?? 0 : 0;
      return Math.max(0, v - below);
    }),
  }));
  const kept = rows.filter((r) => r.cells.some((c) => c !== null && c > 0));
  let max = 0;
  for (const r of kept) for (const c of r.cells) if (c !== null && c > max) max = c;
  return { bounds: kept.map((r) => r.le), times, cells: kept.map((r) => r.cells), max };
}


export type Series = { metric: Record<string, string>; values: [number, string][] }[];

/// The steps already answered, kept so that a refresh asks only for the
/// steps since (issue 44: the whole 15-minute query of ~6,500 bucket series
/// every refresh was a fifth of the server's time with the view open; the
/// loss marks' and alert bands' six queries over the whole range every 5 s
/// were the largest share of what was left). Steps sit at multiples of
/// `step`, so an evaluation at a time is the same whichever query asked for
/// it; those of the last 10 s (at least the last two) are asked again: their
/// data may still have been arriving (the kernel tracer writes each read a
/// round late). Series are told apart by all their labels.
export class Steps {
  private rows = new Map<string, { metric: Record<string, string>; at: Map<number, string> }>();
  private last = -Infinity;
  constructor(readonly query: string, readonly step: number) {}
  /// The range to ask for to cover [lo, hi]: from the steps kept that may
  /// still change.
  want(lo: number, hi: number): [number, number] {
    const first = Math.ceil(lo / this.step) * this.step;
    const again = Math.max(this.step, Math.ceil(10 / this.step) * this.step);
    return [Math.max(first, this.last - again), Math.floor(hi / this.step) * this.step];
  }
  /// Merges an answer from `from` on and forgets steps before `lo`.
  add(r: Series, from: number, lo: number): Series {
    for (const row of this.rows.values()) for (const t of [...row.at.keys()]) if (t >= from - 1e-6 || t < lo) row.at.delete(t);
    for (const x of r) {
      const key = JSON.stringify(Object.entries(x.metric).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
      const row = this.rows.get(key) ?? this.rows.set(key, { metric: x.metric, at: new Map() }).get(key)!;
      for (const [t, v] of x.values) { row.at.set(t, v); this.last = Math.max(this.last, t); }
    }
    for (const [k, row] of this.rows) if (row.at.size === 0) this.rows.delete(k);
    return [...this.rows.values()].map((row) => ({ metric: row.metric, values: [...row.at].sort((a, b) => a[0] - b[0]) }));
  }
}

/// A file's colour on the disk map: the same path, the same colour, in
/// every map (a hash of the path picks the hue; lightness varies so
/// neighbours differ). Free space and everything else have their own.
export function ownerColour(owner: string | null, dark = false): string {
  if (owner === null) return dark ? '#2a2f36' : '#f2f2f2';
  let h = 2166136261;
  for (let i = 0; i < owner.length; i++) { h ^= owner.charCodeAt(i); h = Math.imul(h, 16777619); }
  h >>>= 0;
  return `hsl(${h % 360} 65% ${40 + ((h >>> 9) % 25)}%)`;
}

/// The colours of a map's cells: an owner index into `owners`, -1 free,
/// -2 neither (metadata, files not scanned).
export function cellColours(cells: number[], owners: string[], dark = false): string[] {
  const free = ownerColour(null, dark), other = dark ? '#59616b' : '#9aa0a6';
  const memo = owners.map((o) => ownerColour(o, dark));
  return cells.map((c) => (c === -1 ? free : c < 0 ? other : memo[c] ?? other));
}

/// Text made safe to put in HTML (element content and quoted attributes).
export function escHtml(t: string): string {
  return t.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]!));
}

/// What a profile answer asked with `within` holds: all of the range, or
/// from `named_from` (s) on.
export interface Covers { complete: boolean; named_from: number | null }

/// Whether to ask again at once: the answer holds part of the range, and
/// more of it than the last one did (a server whose kept parts keep being
/// dropped — an agent's late batches — would otherwise be asked without
/// pause); `prev` is updated.
export function progressed(r: Covers, prev: { from: number }): boolean {
  const from = r.complete || r.named_from === null ? -Infinity : r.named_from;
  const more = from > -Infinity && from < prev.from;
  prev.from = from === -Infinity ? Infinity : from;
  return more;
}

