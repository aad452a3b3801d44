// Binds one PanelSpec to the API: loads its history into Columns and folds
// each live event into them (rate, group, map) the way the server would.

import { Columns, PanelSpec, Rater, SeriesDef, combine, groupKey, matches, shareColumns, shares } from './transform';

export interface Frame {
  times: number[];
  step_seconds: number | null;
  series: { name: string; labels: Record<string, string>; values: (number | null)[] }[];
}

export class Feed {
  keys: string[] = [];
  defs: SeriesDef[] = [];
  columns: Columns;
  private members: number[][] = [];
  private liveIdx: number[] = [];
  private rater = new Rater();

  constructor(public spec: PanelSpec, step: number) {
    this.columns = new Columns(step, 0);
  }

  /// History from /api/v1/query (already rated and grouped by the server).
  load(frame: Frame): void {
    this.keys = frame.series.map((s) => groupKey(s, this.spec.by));
    this.defs = frame.series.map((s) => ({ name: s.name, labels: s.labels }));
    this.columns = new Columns(frame.step_seconds ?? this.columns.step, 0);
    this.columns.load(frame.times, this.shown(frame.series.map((s) => s.values)));
    this.rater.reset();
  }

  /// The server's values as the chart shows them: shares, then the map.
  private shown(cols: (number | null)[][]): (number | null)[][] {
    const map = this.spec.map;
    if (this.spec.share) cols = shareColumns(cols);
    return map ? cols.map((c) => c.map((v) => (v === null ? null : map(v)))) : cols;
  }

  /// Replaces buckets `from` (seconds) on with the server's answer
  /// `frame` (on this feed's step; its buckets before `from` are the rates'
  /// lead-in and left out): where the history's read and the live
  /// stream's first point leave a seam (points stored between the two, a
  /// first rate the live side cannot take), or the stream lagged, the
  /// chart shows what the store holds, not a gap it does not.
  repair(frame: Frame, from: number): void {
    const keep = frame.times.map((t) => t >= from - 1e-6);
    const times = frame.times.filter((_, j) => keep[j]);
    const byKey = new Map(frame.series.map((s, i) => [groupKey(s, this.spec.by), i]));
    // Shares are of every group the answer has, as in load().
    const shown = this.shown(frame.series.map((s) => s.values));
    this.columns.replace(times, this.keys.map((k) => {
      const i = byKey.get(k);
      return i === undefined ? undefined : shown[i].filter((_, j) => keep[j]);
    }));
  }

  /// The live stream's series list changed: rebuild which live values feed
  /// which column. Returns true if a column was added (the chart must grow).
  bind(live: SeriesDef[]): boolean {
    let grew = false;
    const groups = new Map<string, number[]>();
    this.liveIdx = [];
    live.forEach((s, i) => {
      if (!matches(this.spec, s)) return;
      const k = groupKey(s, this.spec.by);
      const pos = this.liveIdx.length;
      this.liveIdx.push(i);
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k)!.push(pos);
      if (!this.keys.includes(k)) {
        this.keys.push(k);
        const labels: Record<string, string> = {};
        for (const b of this.spec.by ?? Object.keys(s.labels)) if (b in s.labels) labels[b] = s.labels[b];
        this.defs.push({ name: s.name, labels });
        this.columns.addSeries();
        grew = true;
      }
    });
    this.members = this.keys.map((k) => groups.get(k) ?? []);
    this.rater.reset();
    return grew;
  }

  /// One live `points` event (t in seconds, `ns` exact, values indexed by
  /// the live list).
  push(t: number, values: (number | null)[], ns?: bigint): void {
    let v: (number | null)[] = this.liveIdx.map((i) => values[i] ?? null);
    if (this.spec.rate) v = this.rater.next(t, v, ns);
    let grouped = combine(v, this.members, this.spec.group ?? 'sum');
    if (this.spec.share) grouped = shares(grouped);
    const map = this.spec.map;
    this.columns.push(t, map ? grouped.map((x) => (x === null ? null : map(x))) : grouped, ns);
  }

  gap(t: number): void {
    this.columns.gap(t);
    this.rater.reset();
  }

  /// Legend text for column i: the labels that tell series apart.
  label(i: number): string {
    const d = this.defs[i];
    const multi = this.spec.names.length > 1;
    const short = d.name.replace(/^node_(memory_|network_|disk_|pressure_)?/, '').replace(/_(bytes_)?total$|_bytes$/, '');
    // The labels that tell this series apart: not the host, not one every
    // series of the chart shares (`db="lab"`), not one its name already
    // says (InfluxDB's field: `load_p99_us` with `p99_us`).
    const shared = (k: string, v: string) => this.defs.length > 1 && this.defs.every((o) => o.labels[k] === v);
    let ls = Object.entries(d.labels).filter(([k, v]) => k !== 'host' && !shared(k, v) && !d.name.endsWith(v)).map(([, v]) => v);
    if (ls.length === 0 && !multi && d.labels.host) ls = [d.labels.host];
    return [multi ? short : '', ...ls].filter(Boolean).join(' ') || short;
  }
}
