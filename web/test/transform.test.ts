import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Columns, Rater, Steps, progressed, bucketStart, cellColours, definition, escHtml, ownerColour, combine, MIN_TOP, fmt, formatView, groupKey, heat, latencyGrid, matches, parseView, selector, shares, stack, timeTicks, unionSelector, dataSpan, fitRange, type PanelSpec, type Unit } from '../src/transform';
import { Feed } from '../src/feed';

test('rater: per-second rates against each series\' last value, resets count from zero', () => {
  const r = new Rater();
  assert.deepEqual(r.next(10, [100, 5]), [null, null]);
  assert.deepEqual(r.next(10.5, [150, 5]), [100, 0]);
  assert.deepEqual(r.next(11, [20, null]), [40, null], 'a decrease is a reset');
  // A series with no value at a point: its next rate is against its own
  // last value, over its own interval (the server's consecutive samples).
  assert.deepEqual(r.next(12, [30, 8]), [10, 2]);
  r.reset();
  assert.deepEqual(r.next(13, [40, 9]), [null, null], 'nothing to take a rate against after a reset');
});

test('combine: sum and avg skip missing members; an empty group is a gap', () => {
  assert.deepEqual(combine([1, 3, null, 5], [[0, 1], [2], [2, 3]], 'sum'), [4, null, 5]);
  assert.deepEqual(combine([1, 3, null, 5], [[0, 1], [2], [2, 3]], 'avg'), [2, null, 5]);
});

test('columns: bucketed averages, gaps for skipped buckets, trimmed window', () => {
  const c = new Columns(1, 1);
  c.push(10.1, [1]); c.push(10.6, [3]);
  assert.deepEqual(c.data(), [[10], [2]]);
  c.push(13.2, [5]);
  assert.deepEqual(c.times, [10, 11, 13], 'a skipped span becomes a gap');
  assert.deepEqual(c.cols[0], [2, null, 5]);
  c.push(9, [100]);
  assert.deepEqual(c.cols[0], [2, null, 5], 'older than the tail: ignored');
  c.trim(11);
  assert.deepEqual(c.data(), [[11, 13], [null, 5]]);
  const k = c.addSeries();
  assert.equal(k, 1);
  assert.deepEqual(c.cols[1], [null, null]);
});

test('columns keep memory flat: a window of pushes stays bounded', () => {
  const c = new Columns(0.1, 2);
  for (let i = 0; i < 100000; i++) { c.push(i * 0.1, [i, null]); c.trim(i * 0.1 - 60); }
  assert.ok(c.times.length <= 602, `${c.times.length}`);
});

test('stack: running sums, a missing value adds nothing', () => {
  assert.deepEqual(stack([[1, 2], [3, null], [1, 1]]), [[1, 2], [4, 2], [5, 3]]);
  assert.deepEqual(stack([[null, 1], [null, 2]]), [[null, 1], [null, 3]], 'a bucket with no data stays a gap, not 0');
});

test('matches and groupKey', () => {
  const spec: PanelSpec = { id: 'n', title: '', unit: 'bytes/s', names: ['rx'], labels: { device: '!lo' } };
  assert.ok(matches(spec, { name: 'rx', labels: { device: 'eth0' } }));
  assert.ok(!matches(spec, { name: 'rx', labels: { device: 'lo' } }));
  assert.ok(!matches(spec, { name: 'tx', labels: { device: 'eth0' } }));
  const s = { name: 'cpu', labels: { host: 'a', cpu: '1', mode: 'idle' } };
  assert.equal(groupKey(s, ['host']), 'cpu{host="a"}');
  assert.equal(groupKey(s, undefined), 'cpu{cpu="1",host="a",mode="idle"}');
  assert.equal(selector(spec, { host: 'h' }), '{__name__="rx",host="h",device!="lo"}');
  assert.equal(selector({ ...spec, names: ['a', 'b'], labels: {} }, {}), '{__name__=~"a|b"}');
});

test('view round-trips through the URL hash', () => {
  const v = parseView(formatView({ view: 'host', host: 'vm', range: 'custom', from: 100, to: 200, core: '3' }));
  assert.deepEqual(v, { view: 'host', host: 'vm', range: 'custom', from: 100, to: 200, core: '3' });
  assert.deepEqual(parseView('#view=host'), { view: 'cluster', range: '15m' }, 'a host view needs a host');
  assert.deepEqual(parseView('#range=1h&from=5&to=1'), { view: 'cluster', range: '1h' }, 'an empty custom range is ignored');
});

test('fmt: units', () => {
  assert.equal(fmt(1536, 'bytes/s'), '1.5 KiB/s');
  assert.equal(fmt(55.55, 'percent'), '56 %');
  assert.equal(fmt(0.0005, 'seconds'), '500 µs');
  assert.equal(fmt(null, 'count'), '–');
  assert.deepEqual(heat(0), [20, 30, 70]);
  assert.deepEqual(heat(2), [220, 40, 30]);
});

test('feed: live counters become grouped rates like the server computes', () => {
  const spec: PanelSpec = { id: 'c', title: '', unit: 'percent', names: ['cpu'], labels: { mode: 'idle' }, rate: true,
    by: ['host'], group: 'avg', map: (v) => 100 * (1 - v) };
  const f = new Feed(spec, 0.1);
  f.load({ times: [], step_seconds: 0.1, series: [] });
  const grew = f.bind([
    { name: 'cpu', labels: { host: 'a', cpu: '0', mode: 'idle' } },
    { name: 'cpu', labels: { host: 'a', cpu: '0', mode: 'user' } },
    { name: 'cpu', labels: { host: 'a', cpu: '1', mode: 'idle' } },
    { name: 'cpu', labels: { host: 'b', cpu: '0', mode: 'idle' } },
  ]);
  assert.ok(grew);
  assert.deepEqual(f.keys, ['cpu{host="a"}', 'cpu{host="b"}']);
  f.push(1.0, [10, 0, 10, 10]);
  f.push(1.1, [10.1, 0, 10.05, 10]); // a: idle 1.0 and 0.5 -> avg 0.75 -> 25 % busy; b: 0 idle -> 100 %
  const last = f.columns.cols.map((c) => c[c.length - 1]);
  assert.ok(Math.abs(last[0]! - 25) < 1e-6, `${last[0]}`);
  assert.ok(Math.abs(last[1]! - 100) < 1e-6, `${last[1]}`);
  assert.equal(f.label(0), 'a');
});

test('feed: CPU modes as shares of all CPU time stay within 100 % when a read is late', () => {
  const spec: PanelSpec = { id: 'cpu', title: '', unit: 'percent', names: ['cpu'], rate: true, by: ['mode'], group: 'sum',
    share: true, map: (v) => 100 * v, stacked: true };
  const f = new Feed(spec, 0.1);
  // History from the server: sums by mode, one bucket 1.9 cores of 2 read (a late read).
  f.load({ times: [0.9], step_seconds: 0.1, series: [
    { name: 'cpu', labels: { mode: 'idle' }, values: [0.4] },
    { name: 'cpu', labels: { mode: 'user' }, values: [1.5] },
  ] });
  assert.deepEqual(f.columns.cols.map((c) => c[0]), [100 * 0.4 / 1.9, 100 * 1.5 / 1.9]);
  f.bind([
    { name: 'cpu', labels: { cpu: '0', mode: 'idle' } },
    { name: 'cpu', labels: { cpu: '0', mode: 'user' } },
    { name: 'cpu', labels: { cpu: '1', mode: 'idle' } },
    { name: 'cpu', labels: { cpu: '1', mode: 'user' } },
  ]);
  f.push(1.0, [10, 10, 10, 10]);
  // 0.1 s scheduled, but 0.19 s of CPU time per core read: rates sum to 3.8 of 2 cores.
  f.push(1.1, [10.19, 10.0, 10.0, 10.19]);
  const last = f.columns.cols.map((c) => c[c.length - 1]!);
  assert.deepEqual(last, [50, 50]);
  assert.ok(stack(f.columns.cols).every((c) => c.every((v) => v === null || v <= 100 + 1e-9)));
  assert.deepEqual(shares([1, null, 3]), [0.25, null, 0.75]);
  assert.deepEqual(shares([0, 0]), [null, null]);
});

test('unionSelector: one live selector of every name the panels draw, on one host', () => {
  const spec = (names: string[]): PanelSpec => ({ id: 'x', title: '', unit: 'count', names, labels: { device: '!lo' } });
  assert.equal(unionSelector([spec(['b', 'a']), spec(['a'])], 'h"1'), '{__name__=~"a|b",host="h\\"1"}');
});

test('timeTicks: round local times, at most the number asked, seconds only on fine steps', () => {
  const lo = 1800000000; // a whole hour in UTC
  const minute = timeTicks(lo + 3, lo + 63, 6);
  assert.deepEqual(minute.map((t) => t.t - lo), [10, 20, 30, 40, 50, 60]);
  assert.ok(minute.every((t) => /^\d\d:\d\d:\d\d$/.test(t.label)), JSON.stringify(minute));
  const day = timeTicks(lo, lo + 86400, 8);
  assert.ok(day.length >= 4 && day.length <= 8, JSON.stringify(day));
  // On the hour where the user is (whatever the time zone), evenly spaced.
  assert.ok(day.every((t, i) => /^\d\d:00$/.test(t.label) && (i === 0 || t.t - day[i - 1].t === day[1].t - day[0].t)), JSON.stringify(day));
  assert.deepEqual(timeTicks(lo, lo, 5), []);
  assert.ok(timeTicks(lo, lo + 15 * 60, 10).length <= 10);
});

test('fitRange: the shortest range that shows the data there is', () => {
  assert.equal(fitRange(40), '1m');
  assert.equal(fitRange(61), '5m');
  assert.equal(fitRange(3000), '1h');
  assert.equal(fitRange(86400 * 3), '24h');
  assert.equal(fitRange(null), '15m');
  assert.equal(dataSpan([0, 300, 600, 900], [{ values: [null, null, 1, 2] }, { values: [null, null, null, 3] }], 1000), 400);
  assert.equal(dataSpan([0, 300], [{ values: [null, null] }], 1000), null);
});

test('latency grid: cumulative le series become per-bucket rates, empty rows dropped', () => {
  const s = (le: string, vs: number[]) => ({ metric: { le }, values: vs.map((v, i) => [100 + i, `${v}`] as [number, string]) });
  const g = latencyGrid([s('+Inf', [10, 12]), s('0.001', [4, 12]), s('0.000001', [1, 2]), s('0.01', [10, 12])]);
  assert.deepEqual(g.bounds, [0.000001, 0.001, 0.01], 'sorted by bound; +Inf held nothing more');
  assert.deepEqual(g.times, [100, 101]);
  assert.deepEqual(g.cells, [[1, 2], [3, 10], [6, 0]]);
  assert.equal(g.max, 10);
});

test('disk map: a path keeps its colour across maps; free and other cells have their own', () => {
  assert.equal(ownerColour('db/a'), ownerColour('db/a'));
  assert.notEqual(ownerColour('db/a'), ownerColour('db/b'));
  const c = cellColours([0, -1, 1, -2, 0], ['x', 'y']);
  assert.equal(c[0], ownerColour('x'));
  assert.equal(c[4], c[0]);
  assert.equal(c[2], ownerColour('y'));
  assert.equal(c[1], ownerColour(null));
  assert.notEqual(c[3], c[1]);
  assert.deepEqual(parseView(formatView({ view: 'disk', range: '15m', path: '/mnt/x', before: '1', after: '2' })),
    { view: 'disk', range: '15m', path: '/mnt/x', before: '1', after: '2' });
});

test('escHtml: a file or program name cannot become markup', () => {
  assert.equal(escHtml('<img src=x onerror="a()">&'), '&lt;img src=x onerror=&quot;a()&quot;&gt;&amp;');
});

test('an empty chart\'s value axis: ticks of a fifth of its least top read apart in every unit', () => {
  for (const [unit, top] of Object.entries(MIN_TOP) as [Unit, number][]) {
    const labels = [0, 1, 2, 3, 4, 5].map((k) => fmt((k * top) / 5, unit));
    assert.equal(new Set(labels).size, 6, `${unit}: ${labels.join(', ')}`);
  }
});

test('legend: a series is named by what tells it apart, not by labels every series shares or its name repeats', () => {
  const spec: PanelSpec = { id: 'l', title: 'latency', unit: 'seconds', names: ['load_p50_us', 'load_max_us'] };
  const f = new Feed(spec, 1);
  const s = (name: string, field: string, run: string) => ({ name, labels: { db: 'lab', field, type: 'int', run }, values: [1] });
  f.load({ times: [0], step_seconds: 1, series: [s('load_p50_us', 'p50_us', 'a'), s('load_max_us', 'max_us', 'a'), s('load_p50_us', 'p50_us', 'b')] } as never);
  assert.deepEqual([0, 1, 2].map((i) => f.label(i)), ['load_p50_us a', 'load_max_us a', 'load_p50_us b']);
});

test('exact times: a point on a bucket edge lands where the server puts it; rates over the exact interval', () => {
  // 1795822006.6 s exactly: as float seconds over a 0.1 s step it floors
  // to the bucket before; from its nanoseconds it does not.
  const ns = 1795822006600000000n;
  assert.equal(bucketStart(ns, 0.1), Number(ns) / 1e9);
  assert.equal(bucketStart(ns - 1n, 0.1), Number(ns - 100000000n) / 1e9);
  assert.equal(bucketStart(-1n, 1), -1);
  const c = new Columns(0.1, 1);
  c.push(1795822006.5999999, [1], ns);
  assert.deepEqual(c.times, [Number(ns) / 1e9]);
  // The interval from nanoseconds: 0.07 over exactly 0.1 s.
  const r = new Rater();
  r.next(1795822006.5, [26700.03], ns - 100000000n);
  const [v] = r.next(1795822006.6, [26700.1], ns);
  assert.equal(v, (26700.1 - 26700.03) / 0.1);
});

test('columns: a repair puts the server\'s buckets in place of the same span, the rest kept', () => {
  const c = new Columns(1, 2);
  c.load([10, 11, 12, 13, 14], [[1, null, null, 4, 5], [1, 2, 3, 4, 5]]);
  c.replace([11, 12, 12.999999], [[7, 8, 9], undefined]);
  assert.deepEqual(c.times, [10, 11, 12, 12.999999, 14]);
  assert.deepEqual(c.cols, [[1, 7, 8, 9, 5], [1, null, null, null, 5]]);
  c.push(14.5, [6, 6]);
  assert.deepEqual(c.cols[0], [1, 7, 8, 9, 5.5]);
});

test('definition: a chart as the query it is', () => {
  const cpu: PanelSpec = { id: 'cpu', title: 'CPU', unit: 'percent', names: ['node_cpu_seconds_total'], rate: true, by: ['mode'], group: 'sum', share: true, map: (v) => 100 * v, mapText: '× 100' };
  assert.equal(definition(cpu, { host: 'vm' }),
    '/api/v1/query?query={__name__="node_cpu_seconds_total",host="vm"}&rate=true&by=mode&group=sum&step=S, then each mode as its share of their sum, then × 100');
  assert.equal(definition({ id: 'load', title: 'Load', unit: 'count', names: ['node_load1'] }, { host: 'vm' }),
    '/api/v1/query?query={__name__="node_load1",host="vm"}&step=S');
});

test('latency steps: a refresh asks again for the steps of the last 10 s, merges, forgets what left the range', () => {
  const s = new Steps('q', 5);
  assert.deepEqual(s.want(101, 200), [105, 200]);
  const row = (le: string, pts: [number, number][]) => ({ metric: { le }, values: pts.map(([t, v]) => [t, String(v)] as [number, string]) });
  s.add([row('0.1', [[105, 1], [110, 2], [195, 3], [200, 4]])], 105, 101);
  assert.deepEqual(s.want(111, 210), [190, 210]);
  const all = s.add([row('0.1', [[195, 30], [200, 40], [205, 50]]), row('+Inf', [[205, 9]])], 190, 111);
  assert.deepEqual(all, [row('0.1', [[195, 30], [200, 40], [205, 50]]), row('+Inf', [[205, 9]])]);
});

test('steps: series told apart by every label in any order; a series whose steps all left the range is gone', () => {
  const s = new Steps('q', 1);
  const pts = (metric: Record<string, string>, ts: number[]) => ({ metric, values: ts.map((t) => [t, '1'] as [number, string]) });
  s.add([pts({ host: 'a', job: 'x' }, [10, 11]), pts({ host: 'b', job: 'x' }, [11])], 10, 10);
  const all = s.add([pts({ job: 'x', host: 'a' }, [12])], 12, 11);
  assert.deepEqual(all, [pts({ host: 'a', job: 'x' }, [11, 12]), pts({ host: 'b', job: 'x' }, [11])]);
  assert.deepEqual(s.add([], 13, 13), []);
});

test('a hurried profile is asked again only while each answer holds more of the range', () => {
  const prev = { from: Infinity };
  const part = (from: number) => ({ complete: false, named_from: from });
  assert.equal(progressed(part(900), prev), true);
  assert.equal(progressed(part(800), prev), true);
  assert.equal(progressed(part(800), prev), false, 'no progress: wait for the next refresh');
  assert.equal(progressed({ complete: true, named_from: null }, prev), false);
  assert.equal(progressed(part(950), prev), true, 'after a complete answer, a new hurried one starts over');
});
