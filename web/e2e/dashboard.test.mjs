// End to end: the real binary, the real dashboard, headless Debian Chromium.
// Screenshots go to web/e2e-out/.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, fsyncSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { startKansoku, BIN, CHROMIUM, CHROMIUM_ARGS } from './server.mjs';

const OUT = new URL('../e2e-out/', import.meta.url).pathname;
mkdirSync(OUT, { recursive: true });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
after(() => browser.close());

const updates = (page) => page.evaluate(() => window.__kansoku.updates);
const waitUpdates = (page, n) => page.waitForFunction((n) => window.__kansoku.updates >= n, n, { timeout: 30000 });
const chartPixels = (page, i) => page.evaluate((i) => document.querySelectorAll('.uplot canvas')[i].toDataURL(), i);

// Every chart is its query (issue 44): each chart's and heat map's columns
// on the page — the history it loaded and every live point it folded in
// since — equal /api/v1/query's answer over the same buckets (the rate, the
// `by` groups and their `group` server-side; then each group's share of
// their sum where the panel says `share`, and the panel's map), as
// docs/dashboard.md defines each one. The query is built here from the
// panel's spec, not by the page's code. The first two buckets of the
// answer (a rate needs the sample before) and the page's newest (still
// filling) are left out; everything between must agree.
// The panels' maps (panels.ts): idle time as busy %, a share or a rate of
// CPU seconds as %.
const mapOf = (spec) => spec.labels?.mode === 'idle' ? (v) => Math.min(100, Math.max(0, 100 * (1 - v)))
  : spec.unit === 'percent' ? (v) => 100 * v : assert.fail(`no map known for chart ${spec.id}`);
async function chartsAreTheirQueries(page, url, host) {
  // The seam between the history and the live points mended first.
  await page.waitForFunction(() => window.__kansoku.repairsDue > 0 && window.__kansoku.repairs === window.__kansoku.repairsDue, null, { timeout: 30000 });
  const charts = await page.evaluate(() => window.__kansokuApp.charts.map((c) => ({
    spec: { ...c.feed.spec, map: c.feed.spec.map ? 'yes' : undefined }, defs: c.feed.defs,
    step: c.feed.columns.step, times: c.feed.columns.times.slice(), cols: c.feed.columns.cols.map((col) => col.slice()) })));
  assert.ok(charts.length >= 1, `charts on the page: ${charts.length}`);
  let compared = 0;
  for (const c of charts) {
    const { spec, step, times } = c;
    if (times.length < 4) continue;
    const m = [spec.names.length === 1 ? `__name__="${spec.names[0]}"` : `__name__=~"${spec.names.join('|')}"`];
    for (const [k, v] of Object.entries({ ...(host ? { host } : {}), ...(spec.labels ?? {}) })) m.push(v.startsWith('!') ? `${k}!="${v.slice(1)}"` : `${k}="${v}"`);
    const from = times[0], to = times[times.length - 1];
    const p = new URLSearchParams({ query: `{${m.join(',')}}`, from: String(from), to: String(to), step: `${Math.round(step * 1e6)}us` });
    if (spec.rate) p.set('rate', 'true');
    if (spec.by) { p.set('by', spec.by.join(',')); p.set('group', spec.group ?? 'sum'); }
    const r = await fetch(`${url}/api/v1/query?${p}`);
    const frame = await r.json();
    assert.equal(r.status, 200, JSON.stringify(frame));
    const map = spec.map ? mapOf(spec) : (v) => v;
    // The answer's columns, in the page's column order (matched by labels).
    const same = (a, b) => JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
    const keyOf = (s) => spec.by ? Object.fromEntries(spec.by.filter((b) => b in s.labels).map((b) => [b, s.labels[b]])) : s.labels;
    let cols = c.defs.map((d) => {
      const s = frame.series.find((s) => s.name === d.name && same(keyOf(s), spec.by ? keyOf(d) : d.labels));
      return s ? s.values : frame.times.map(() => null);
    });
    if (spec.share) {
      cols = cols.map((col, i) => col.map((v, j) => {
        const total = cols.reduce((a, c2) => a + (c2[j] ?? 0), 0);
        return v === null || !(total > 0) ? null : v / total;
      }));
    }
    const at = new Map(frame.times.map((t, j) => [Math.round(t / step), j]));
    for (let j = 0; j < times.length - 1; j++) {
      const k = at.get(Math.round(times[j] / step));
      if (k === undefined || k < 2) continue;
      for (let i = 0; i < c.cols.length; i++) {
        const got = c.cols[i][j], w = cols[i][k];
        const want = w === null ? null : map(w);
        const ok = got === null ? want === null : want !== null && Math.abs(got - want) <= 1e-9 * Math.max(1, Math.abs(want));
        assert.ok(ok, `${spec.id} ${JSON.stringify(c.defs[i].labels)} at ${times[j]}: the page draws ${got}, /api/v1/query?${p} gives ${want}`);
        compared++;
      }
    }
  }
  return compared;
}

test('this host, live: charts receive and render new points, zoom into the past, themes', async () => {
  const k = await startKansoku(['up', '--host', 'e2e-host', '--interval', '100ms']);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/');
    // One host: the dashboard opens on it, on a range that fits its seconds
    // of data (not 15 minutes with the data in the right 7 %).
    await page.waitForFunction(() => location.hash.includes('host=e2e-host'), null, { timeout: 30000 });
    assert.match(await page.evaluate(() => location.hash), /range=1m/);
    await page.waitForSelector('.uplot canvas', { timeout: 30000 });
    const titles = await page.$$eval('.u-title', (ts) => ts.map((t) => t.textContent));
    for (const want of ['CPU by mode', 'Load average', 'Memory', 'Network per interface', "kansoku's own CPU"]) {
      assert.ok(titles.some((t) => t.startsWith(want)), `chart ${want} in ${titles}`);
    }
    // Sections this host has no data for say which flag fills them.
    await page.waitForFunction(() => document.querySelectorAll('.absent').length >= 2, null, { timeout: 30000 });
    const absent = await page.$$eval('.absent', (as) => as.map((a) => a.textContent).join('\n'));
    assert.match(absent, /--processes/);
    assert.match(absent, /--perf HZ/);
    const n0 = await updates(page);
    const before = await chartPixels(page, 0);
    await waitUpdates(page, n0 + 20);
    // Every chart and the per-core map are their queries, live points included.
    const compared = await chartsAreTheirQueries(page, k.url, 'e2e-host');
    assert.ok(compared >= 200, `values compared: ${compared}`);
    const st = await page.evaluate(() => window.__kansoku);
    assert.ok(Math.abs(st.lastT - Date.now() / 1000) < 10, `live points are current: ${st.lastT}`);
    assert.ok(st.frames.length >= 10, 'frames measured');
    assert.notEqual(await chartPixels(page, 0), before, 'the CPU chart redrew with new points');
    // The CPU chart's last bucket holds data (not a gap) after live updates.
    const cpuLegend = await page.$$eval('.u-legend .u-value', (vs) => vs.map((v) => v.textContent));
    assert.ok(cpuLegend.length > 0);
    await page.screenshot({ path: OUT + 'host-live.png', fullPage: true });

    // Last minute, then drag across the last seconds of the first chart:
    // zooms into that past range, which holds data.
    await page.click('[data-range="1m"]');
    await page.waitForFunction(() => /range=1m/.test(location.hash) && document.querySelector('.uplot canvas'));
    const n2 = await updates(page);
    await waitUpdates(page, n2 + 30);
    const over = await page.$('.u-over');
    await over.scrollIntoViewIfNeeded();
    const box = await over.boundingBox();
    await page.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.99, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
    await page.waitForFunction(() => /from=/.test(location.hash) && document.querySelector('.uplot canvas'), null, { timeout: 10000 });
    assert.ok(await page.evaluate(() => window.__kansoku.loadedCells) > 0, 'the zoomed past range has data');
    const hash = new URLSearchParams((await page.evaluate(() => location.hash)).slice(1));
    const from = +hash.get('from'), to = +hash.get('to');
    assert.ok(to > from && to < Date.now() / 1000, `zoomed into the past: ${from}..${to}`);
    assert.equal(await page.textContent('#pause'), 'Back to live');
    await page.screenshot({ path: OUT + 'host-zoomed.png', fullPage: true });
    // The shared URL opens the same view.
    const p2 = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await p2.goto(k.url + '/#' + hash.toString());
    await p2.waitForSelector('.uplot canvas');
    assert.equal(await p2.textContent('#pause'), 'Back to live');
    await p2.close();

    // The custom range picker: 2 minutes ending a minute ago.
    const local = (t) => { const d = new Date(t); return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); };
    await page.fill('#from', local(Date.now() - 180000));
    await page.fill('#to', local(Date.now() - 60000));
    await page.click('#apply');
    await page.waitForFunction(() => { const p = new URLSearchParams(location.hash.slice(1)); return +p.get('to') - +p.get('from') > 110 && +p.get('to') - +p.get('from') < 130; },
      null, { timeout: 10000 });
    await page.waitForSelector('.uplot canvas');

    await page.click('#pause');
    await page.click('#theme');
    await page.waitForFunction(() => document.body.classList.contains('dark') && document.querySelector('.uplot canvas'));
    const n1 = await updates(page);
    await waitUpdates(page, n1 + 5);
    await page.screenshot({ path: OUT + 'host-dark.png', fullPage: true });
    assert.deepEqual(errors, [], 'no page errors');
    assert.deepEqual(await page.evaluate(() => window.__kansoku.errors), []);
  } finally {
    await k.stop();
  }
});

test('cluster view: a heat map row per host, live, click through to a host', async () => {
  const k = await startKansoku(['lab', 'synth', '--hosts', '24', '--cores', '4', '--interval', '100ms']);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=cluster&range=1m');
    await page.waitForSelector('#heat canvas', { timeout: 30000 });
    await page.waitForFunction(() => document.querySelector('#count')?.textContent.startsWith('24 hosts'), null, { timeout: 30000 });
    const n0 = await updates(page);
    await waitUpdates(page, n0 + 20);
    // The map is its query (busy % per host), live points included.
    assert.ok(await chartsAreTheirQueries(page, k.url, null) >= 24 * 10);
    // Coloured cells exist (data drawn, not all background).
    const coloured = await page.evaluate(() => {
      const c = document.querySelector('#heat canvas');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] === 255) n++;
      return n / (d.length / 4);
    });
    assert.ok(coloured > 0.01, `heat map has coloured cells: ${coloured}`);
    // The map's time axis and colour scale.
    const decor = await page.evaluate(() => ({ x: document.querySelectorAll('#heat .axis-x .tick').length, scale: [...document.querySelectorAll('#heat .colour-scale .tick')].map((t) => t.textContent) }));
    assert.ok(decor.x >= 2 && decor.scale.length === 3 && decor.scale[2] === '100 %', JSON.stringify(decor));
    await page.selectOption('#sort', 'value');
    await page.screenshot({ path: OUT + 'cluster.png', fullPage: true });
    const canvas = await page.$('#heat canvas');
    const box = await canvas.boundingBox();
    await page.mouse.click(box.x + box.width - 5, box.y + 2);
    await page.waitForFunction(() => /view=host&host=synth-/.test(location.hash), null, { timeout: 10000 });
    await page.waitForSelector('.uplot canvas', { timeout: 30000 });
    const n1 = await updates(page);
    await waitUpdates(page, n1 + 10);
    await page.screenshot({ path: OUT + 'cluster-host.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
  }
});

test('a server with three agents: three live hosts in the agents table and the heat map', async () => {
  const k = await startKansoku(['server', '--ingest', '127.0.0.1:0']);
  const ingest = /agents on ([\d.:]+)/.exec(k.log())[1];
  const agents = [1, 2, 3].map((i) => spawn(BIN, ['agent', '--server', ingest, '--host', `agent-${i}`,
    '--data', join(k.data, `agent-${i}`), '--interval', '100ms', '--batch', '500ms', '--trace', 'off'], { stdio: 'ignore' }));
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=cluster&range=1m');
    await page.waitForFunction(() => document.querySelectorAll('table.agents .badge.ok').length === 3, null, { timeout: 30000 });
    const rows = await page.$$eval('table.agents tr[data-host]', (trs) => trs.map((tr) => tr.dataset.host));
    assert.deepEqual(rows, ['agent-1', 'agent-2', 'agent-3']);
    // Their data reaches the heat map too (reload: hosts that appear later join on the next load).
    await page.reload();
    await page.waitForFunction(() => document.querySelector('#count')?.textContent.startsWith('3 hosts'), null, { timeout: 30000 });
    await page.waitForFunction(() => document.querySelectorAll('table.agents .badge.ok').length === 3, null, { timeout: 30000 });
    await page.screenshot({ path: OUT + 'server-agents.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await Promise.all(agents.map((a) => new Promise((ok) => { a.on('exit', ok); a.kill('SIGTERM'); })));
    await k.stop();
  }
});

test('host view with --perf: top symbols, a flame graph and a per-CPU timeline', async () => {
  const k = await startKansoku(['up', '--host', 'perf-web', '--interval', '100ms', '--perf', '10000', '--perf-callchain']);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=host&host=perf-web&range=1m');
    await page.waitForFunction(() => document.querySelectorAll('table.profile tr').length >= 4, null, { timeout: 30000 });
    const rows = await page.$$eval('table.profile tr', (trs) => trs.slice(1).map((tr) => [...tr.children].map((td) => td.textContent.trim())));
    // Ranked, each with a share, the kernel's idle or whatever ran on top.
    assert.equal(rows[0][0], '1');
    assert.ok(rows.every((r) => /%$/.test(r[4])), JSON.stringify(rows));
    // The flame graph: the root, processes above it, call chains above them.
    await page.waitForFunction(() => document.querySelectorAll('#flame .fr').length >= 10, null, { timeout: 30000 });
    // Asked with `within`, the graph is asked again until it holds the whole range.
    await page.waitForFunction(() => window.__kansoku.flameComplete, null, { timeout: 30000 });
    const bottoms = await page.$$eval('#flame .fr', (bs) => bs.map((b) => parseInt(b.style.bottom, 10)));
    assert.ok(Math.max(...bottoms) >= 3 * 17, `frames stack up: ${Math.max(...bottoms)}px`);
    assert.ok(!(await page.textContent('.flame-title')).includes('no call chains'));
    // Frames narrower than a pixel are merged server-side: the same samples
    // in fewer frames, every parent still the sum of what is drawn above it.
    // The page has drawn call chains, so the window to now holds some.
    const to = Math.ceil(Date.now() / 1000), flameOf = async (w) =>
      (await fetch(`${k.url}/api/v1/profile/flame?host=perf-web&from=${to - 30}&to=${to}${w ? `&width=${w}` : ''}`)).json();
    // Poll until every sample of the window is stored: past its end, two
    // answers alike, with call chains in them.
    let full = await flameOf(0);
    for (const deadline = Date.now() + 30000; ;) {
      await new Promise((ok) => setTimeout(ok, 250));
      const again = await flameOf(0);
      if (Date.now() > to * 1000 + 2000 && again.samples === full.samples && again.frames.length >= 10) break;
      assert.ok(Date.now() < deadline, `the window to ${to} never settled: ${again.samples} samples, ${again.frames.length} frames`);
      full = again;
    }
    const narrow = await flameOf(50);
    assert.equal(narrow.frames.filter(([, , d]) => d === 1).reduce((n, [, v]) => n + v, 0), narrow.samples, 'the processes add up to every sample');
    assert.ok(narrow.merged_frames > 0 && narrow.frames.length < full.frames.length, `${narrow.frames.length} of ${full.frames.length} frames`);
    const above = narrow.frames.map(() => 0), path = [], min = Math.ceil(narrow.samples / 50);
    narrow.frames.forEach(([name, v, d], i) => {
      path.length = d;
      if (d > 0) above[path[d - 1]] += v;
      path.push(i);
      assert.ok(v >= min || name === '…', `${name}: ${v} samples, under a pixel (${min}) yet sent`);
    });
    assert.ok(narrow.frames.every(([, v], i) => above[i] <= v), 'no frame holds more above it than itself');
    // Zoom into the first process and back out.
    const procBox = await page.$('#flame .fr[data-d="1"]');
    await procBox.click();
    await page.waitForFunction(() => document.querySelector('.flame-title').textContent.includes('zoomed into'));
    await page.click('#flame .fr[data-d="0"]');
    await page.waitForFunction(() => !document.querySelector('.flame-title').textContent.includes('zoomed into'));
    // The per-CPU timeline: a row per CPU and a legend of processes.
    await page.waitForFunction(() => document.querySelector('#timeline canvas')?.height >= 12 && document.querySelectorAll('#timeline .legend span').length >= 1, null, { timeout: 30000 });
    await page.screenshot({ path: OUT + 'host-profile.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
  }
});

test('alerts and the kernel: a firing rule shows in the banner and shades the charts; the system call table and latency heat map fill; the verdict strip names a window, the cluster view too', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kansoku-e2e-rules-'));
  const rules = join(dir, 'rules.yml');
  writeFileSync(rules, `groups:
  - name: e2e
    interval: 200ms
    rules:
      - alert: LoadSeen
        expr: node_load1 >= 0
        labels: { severity: page }
        annotations: { summary: "load is {{ $value }}" }
`);
  const k = await startKansoku(['up', '--host', 'alert-web', '--interval', '100ms', '--rules', rules]);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=host&host=alert-web&range=1m');
    await page.waitForFunction(() => window.__kansoku.alertsShown >= 1, null, { timeout: 30000 });
    const text = await page.textContent('#alerts');
    assert.match(text, /1 firing, 0 pending/);
    assert.match(text, /LoadSeen @ alert-web: load is /);
    assert.equal(await page.getAttribute('#alerts', 'class'), 'firing');
    // Marks: the firing span is shaded on the charts as they redraw.
    await page.waitForFunction(() => window.__kansoku.bandsDrawn > 0, null, { timeout: 30000 });
    // The kernel's system call table (kernel tracing is on by default).
    await page.waitForFunction(() => window.__kansoku.kernelRows >= 3, null, { timeout: 30000 });
    const calls = await page.$$eval('table.kernel tr td.sym', (tds) => tds.map((td) => td.textContent));
    assert.ok(calls.length >= 3 && calls.every((c) => /^[a-z0-9_]+$/.test(c)), `system calls named: ${calls}`);
    // Every number true (issue 44): the table's columns are the PromQL the
    // docs define them by, over the real tracer's data (buckets born as
    // calls first use them, counters of 300 calls) ...
    const to = Math.floor(Date.now() / 1000) - 1, from = to - 20;
    const table = await (await fetch(`${k.url}/api/v1/kernel/syscalls?host=alert-web&from=${from}&to=${to}&n=1000`)).json();
    assert.ok(table.rows.length >= 3, JSON.stringify(table));
    const sel = (s) => `kernel_syscall_seconds_${s}{host="alert-web"}[${table.window}]`;
    const buckets = `sum by (syscall, le) (increase(${sel('bucket')}))`;
    for (const [column, query] of [
      ['calls', `sum by (syscall) (increase(${sel('count')}))`],
      ['time_seconds', `sum by (syscall) (increase(${sel('sum')}))`],
      ['p50_seconds', `histogram_quantile(0.5, ${buckets})`],
      ['p99_seconds', `histogram_quantile(0.99, ${buckets})`],
    ]) {
      const r = await (await fetch(`${k.url}/prometheus/api/v1/query?${new URLSearchParams({ query, time: String(to) })}`)).json();
      const want = new Map(r.data.result.map((x) => [x.metric.syscall, Number(x.value[1])]));
      for (const row of table.rows) {
        const w = want.get(row.syscall), got = row[column];
        if (row.at_least.includes(column) && Number.isNaN(w)) continue;
        assert.ok(got === null ? Number.isNaN(w) : Math.abs(got - w) <= 1e-9 * Math.abs(w), `${row.syscall} ${column}: table ${got}, ${query} = ${w}`);
      }
    }
    // ... and CPU by mode, a share of all cores, stacks to at most 100 %.
    const cpuMax = await page.evaluate(() => {
      const cols = window.__kansokuApp.charts.find((c) => c.feed.spec.id === 'cpu').feed.columns.cols;
      let max = 0;
      for (let j = 0; j < cols[0].length; j++) max = Math.max(max, cols.reduce((s, c) => s + (c[j] ?? 0), 0));
      return max;
    });
    assert.ok(cpuMax > 50 && cpuMax <= 100 + 1e-6, `CPU by mode stacks to ${cpuMax} %`);
    // The verdict strip: a window named, its evidence a click away.
    await page.waitForFunction(() => window.__kansoku.verdicts >= 1, null, { timeout: 40000 });
    await page.click('#verdicts .strip span:last-child');
    await page.waitForSelector('#evidence table.evidence', { timeout: 10000 });
    assert.match(await page.textContent('#evidence'), /CPU busy share/);
    // The latency heat map of the system calls: buckets over time.
    await page.waitForFunction(() => window.__kansoku.latencyRows >= 3, null, { timeout: 30000 });
    assert.ok(await page.$('#latency canvas'), 'a latency heat map is drawn');
    // Every picture readable (issue 44): the latency heat map has a latency
    // axis, a time axis and a colour scale; the per-core map its cores, time
    // and scale; the verdict strip its times.
    const decor = (sel) => page.evaluate((sel) => {
      const el = document.querySelector(sel);
      const n = (q) => el?.querySelectorAll(q).length ?? 0;
      return { x: n('.axis-x .tick'), y: n('.axis-y .tick'), scale: n('.colour-scale .tick'), labels: [...(el?.querySelectorAll('.tick') ?? [])].map((t) => t.textContent) };
    }, sel);
    await page.waitForFunction(() => document.querySelectorAll('#latency .axis-y .tick').length >= 2, null, { timeout: 30000 });
    // Its cells are its PromQL: each row's rate less the row below's.
    await page.waitForFunction(() => { const l = window.__kansoku.latency; return l && l.bounds.length > 0 && l.times[l.times.length - 1] - l.times[0] > 12; }, null, { timeout: 40000 });
    const drawn = await page.evaluate(() => window.__kansoku.latency);
    const res = (await (await fetch(`${k.url}/prometheus/api/v1/query_range?${drawn.query}`)).json()).data.result;
    const cum = new Map(res.map((x) => [x.metric.le === '+Inf' ? 'Infinity' : String(Number(x.metric.le)), new Map(x.values.map(([t, v]) => [t, Number(v)]))]));
    const les = [...cum.keys()].sort((a, b) => Number(a) - Number(b));
    // The newest 10 s of steps are asked again on the next paint (their
    // data may still arrive: the tracer writes each read a round late), so
    // only the settled ones are held to the later query.
    const settled = drawn.times[drawn.times.length - 1] - 10;
    let cellsCompared = 0;
    drawn.bounds.forEach((le, r) => {
      const i = les.indexOf(le);
      assert.ok(i >= 0, `row ${le} is a bucket of ${drawn.query}`);
      drawn.times.forEach((t, j) => {
        if (t > settled) return;
        const v = cum.get(le).get(t), below = i > 0 ? cum.get(les[i - 1]).get(t) ?? 0 : 0;
        const want = v === undefined ? null : Math.max(0, v - below), got = drawn.cells[r][j];
        assert.ok(got === null ? want === null : Math.abs(got - want) <= 1e-9 * Math.max(1, want), `latency ${le} at ${t}: drawn ${got}, query ${want}`);
        cellsCompared++;
      });
    });
    assert.ok(cellsCompared >= 3, `latency cells compared: ${cellsCompared}`);
    const lat = await decor('#latency');
    assert.ok(lat.x >= 2 && lat.y >= 2 && lat.scale >= 3, JSON.stringify(lat));
    assert.ok(lat.labels.some((l) => /\d (ns|µs|ms|s)$/.test(l)) && lat.labels.some((l) => /^\d\d:\d\d:\d\d$/.test(l)), JSON.stringify(lat.labels));
    const cores = await decor('#cores');
    assert.ok(cores.x >= 2 && cores.scale >= 3 && cores.labels.includes('100 %'), JSON.stringify(cores));
    // Every core named (a 2-core machine once showed "CPU 0" alone).
    const cpus = availableParallelism();
    assert.equal(cores.y, cpus, JSON.stringify(cores));
    assert.ok([...Array(cpus).keys()].every((c) => cores.labels.includes(`CPU ${c}`)), JSON.stringify(cores));
    assert.ok((await decor('#verdicts')).x >= 2);
    await page.screenshot({ path: OUT + 'host-alert.png', fullPage: true });
    // The cluster view: the host's verdict beside its name.
    await page.goto(k.url + '/#view=cluster&range=1m');
    await page.waitForFunction(() => window.__kansoku.clusterVerdicts >= 1, null, { timeout: 30000 });
    // No SNMP targets here: the metric menu offers no SNMP metric.
    const offered = await page.$$eval('#metric option', (os) => os.map((o) => o.value));
    assert.ok(offered.includes('cpu') && !offered.some((o) => o.startsWith('snmp')), JSON.stringify(offered));
    const dot = await page.getAttribute('#names .vd', 'title');
    assert.match(dot, /^(healthy|cpu-busy-user|cpu-busy-kernel|io-bound|network-bound|lock-contention|memory-pressure) \(\d+ %\)$/);
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the disk view: two maps of where the files are, their figures, the most fragmented files', async () => {
  // Two files written by interleaved, fsynced appends: fragmented on ext4.
  const dir = mkdtempSync(join(tmpdir(), 'kansoku-e2e-frag-'));
  const fds = ['a', 'b'].map((n) => openSync(join(dir, n), 'w'));
  for (let i = 0; i < 64; i++) for (const fd of fds) { writeSync(fd, Buffer.alloc(4096, 0x5a)); fsyncSync(fd); }
  fds.forEach(closeSync);
  const k = await startKansoku(['up', '--host', 'disk-web', '--interval', '1s', '--trace', 'off', '--fragmentation', dir, '--fragmentation-interval', '1s']);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=disk&zoom=files');
    await page.waitForFunction(() => window.__kansoku.diskMaps >= 2, null, { timeout: 30000 });
    assert.equal(await page.$$eval('.frag-maps canvas', (cs) => cs.length), 2);
    const files = await page.$$eval('#frag-b table.frag-files td.sym', (tds) => tds.map((td) => td.textContent));
    assert.deepEqual(files.sort(), ['a', 'b']);
    // The map is drawn: more than one colour on the canvas.
    const colours = await page.$eval('#frag-b canvas', (c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, seen = new Set();
      for (let i = 0; i < d.length; i += 16) seen.add(`${d[i]},${d[i + 1]},${d[i + 2]}`);
      return seen.size;
    });
    assert.ok(colours >= 3, `colours on the map: ${colours}`);
    await page.screenshot({ path: OUT + 'disk.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the processes and cgroups tables: a busy program tops it with its sparkline; a click zooms the flame graph into it', async () => {
  // Every core busy: the bounds below are tested where they bind.
  const busy = Array.from({ length: availableParallelism() }, () => spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }));
  const k = await startKansoku(['up', '--host', 'procs-web', '--interval', '1s', '--trace', 'off', '--processes', '1s', '--perf', '997']);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=host&host=procs-web&range=1m');
    // The busy shell's group heads the table once its rate is measured.
    await page.waitForFunction(() => document.querySelector('table.processes tr[data-group]')?.dataset.group === 'sh', null, { timeout: 40000 });
    const first = await page.$eval('table.processes tr[data-group]', (tr) => [...tr.children].map((td) => td.textContent.trim()));
    assert.ok(Number(first[1]) > 0.3, `sh used ${first[1]} cores`);
    assert.ok(await page.$('table.processes canvas.spark'), 'a sparkline per row');
    // The cgroups: the root at least (this VM's v1 cpuacct and cgroup2 both have it).
    await page.waitForFunction(() => document.querySelector('#cgroups tr[data-group="/"]'), null, { timeout: 30000 });
    // Over a settled range, each table as the page shows it is its queries'
    // answers (asked of /prometheus), and no group uses more cores than
    // the machine has (beyond a clock tick per process and window).
    const to = Math.floor(Date.now() / 1000) - 3, from = to - 60, cpus = availableParallelism();
    const fixed = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    fixed.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await fixed.goto(`${k.url}/#view=host&host=procs-web&from=${from}&to=${to}`);
    for (const [kind, el] of [['processes', '#processes'], ['cgroups', '#cgroups']]) {
      await fixed.waitForFunction((el) => document.querySelector(`${el} tr[data-group]`), el, { timeout: 30000 });
      const shown = await fixed.$$eval(`${el} tr[data-group]`, (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent.trim())));
      const api = await (await fetch(`${k.url}/api/v1/tasks?host=procs-web&kind=${kind}&n=15&points=60&from=${from}&to=${to}`)).json();
      const label = api.label;
      const prom = async (query) => {
        const r = await (await fetch(`${k.url}/prometheus/api/v1/query?query=${encodeURIComponent(query)}&time=${to}`)).json();
        assert.equal(r.status, 'success', query);
        return new Map(r.data.result.map((s) => [s.metric[label], Number(s.value[1])]));
      };
      const [cores, now, count] = [await prom(api.queries.cores), await prom(api.queries.now), await prom(api.queries.count)];
      const three = (v) => (v === undefined ? '–' : v.toFixed(3));
      const ranked = [...cores].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 15).map(([n]) => n);
      assert.deepEqual(shown.map((r) => r[0]), ranked, `${kind}: the table's order is its cores query's`);
      for (const [name, c, , n, , procs] of shown) {
        assert.equal(c, three(cores.get(name)), `${kind} ${name}: cores shown ${c}, ${api.queries.cores}`);
        assert.equal(n, three(now.get(name)), `${kind} ${name}: now shown ${n}, ${api.queries.now}`);
        assert.equal(procs, count.has(name) ? String(count.get(name)) : '–', `${kind} ${name}: ${api.queries.count}`);
        for (const v of [Number(c), Number(n)].filter(Number.isFinite)) {
          assert.ok(v <= cpus * 1.02, `${kind} ${name}: ${v} cores on a ${cpus}-core machine`);
        }
      }
    }
    await fixed.close();
    // Into the flame graph: zoomed on the shell's process.
    await page.waitForFunction(() => document.querySelectorAll('#flame .fr').length >= 3, null, { timeout: 30000 });
    await page.click('table.processes tr[data-group="sh"]');
    await page.waitForFunction(() => /zoomed into sh \(/.test(document.querySelector('.flame-title')?.textContent ?? ''), null, { timeout: 10000 });
    await page.screenshot({ path: OUT + 'processes.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    for (const b of busy) b.kill();
    await k.stop();
  }
});

test('SNMP targets in the cluster view: a heat-map row per target; loss marked where it happened', async () => {
  // Three fake agents (kansoku lab snmp-farm) on a port of their own.
  const port = 20000 + (process.pid % 20000);
  const farm = spawn(BIN, ['lab', 'snmp-farm', '--count', '3', '--first', '127.3.9.1', '--port', String(port)], { stdio: ['pipe', 'ignore', 'pipe'] });
  await new Promise((ok, fail) => {
    let log = '';
    farm.stderr.on('data', (d) => { log += d; if (log.includes('snmp-farm: serving')) ok(); });
    farm.on('exit', (c) => fail(new Error(`the farm exited (${c}): ${log}`)));
  });
  const dir = mkdtempSync(join(tmpdir(), 'kansoku-e2e-snmp-'));
  const targets = join(dir, 'targets.txt');
  writeFileSync(targets, [1, 2, 3].map((i) => `127.3.9.${i}:${port} v2c oids=1.3.6.1.2.1.1.3.0`).join('\n') + '\n');
  const k = await startKansoku(['up', '--host', 'snmp-web', '--interval', '1s', '--trace', 'off', '--snmp-targets', targets]);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=cluster&metric=snmp-up&range=1m');
    await page.waitForFunction(() => document.querySelectorAll('#names div').length >= 3, null, { timeout: 30000 });
    const names = await page.$$eval('#names div', (ds) => ds.map((d) => d.textContent.trim()));
    assert.deepEqual(names.sort(), [1, 2, 3].map((i) => `127.3.9.${i}:${port}`));
    assert.match(await page.textContent('#count'), /^3 SNMP targets/);
    await page.screenshot({ path: OUT + 'cluster-snmp.png' });

    // Faults on demand: the server stopped for 2.5 s (its collector misses
    // rounds), the agents stopped (silent targets). Each is marked where it
    // happened, its reason on hover.
    const pause = (pid, ms) => { process.kill(pid, 'SIGSTOP'); return new Promise((ok) => setTimeout(() => { process.kill(pid, 'SIGCONT'); ok(); }, ms)); };
    await pause(k.pid, 2500);
    farm.kill('SIGSTOP');
    await page.waitForFunction(() => window.__kansoku.heatMarks > 0 && window.__kansoku.markReasons.some((r) => r.startsWith('silent')),
      null, { timeout: 30000 });
    farm.kill('SIGCONT');
    await page.screenshot({ path: OUT + 'cluster-snmp-silent.png' });
    await page.goto(k.url + '/#view=host&host=snmp-web&range=1m');
    await page.waitForSelector('.u-over .drops i.drop', { timeout: 30000 });
    const ticks = await page.$$eval('.u-over .drops i.drop', (is) => is.map((i) => i.title));
    assert.ok(ticks.some((t) => /collector round\(s\) missed: a round overran its interval or the machine stalled$/.test(t)), JSON.stringify(ticks));
    await page.screenshot({ path: OUT + 'host-drops.png' });
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
    farm.stdin.end();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a load run (lab load --server) shows in the host view: responses, failures and latency per interval, named by run', async () => {
  const k = await startKansoku(['up', '--host', 'load-web', '--interval', '1s', '--trace', 'off']);
  try {
    // Load on the server itself, its series sent to it.
    const load = spawn(BIN, ['lab', 'load', `${k.url}/ping`, '-c', '2', '-d', '2s', '--server', k.url, '--run', 'e2e-run'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    load.stderr.on('data', (d) => { log += d; });
    const code = await new Promise((ok) => load.on('exit', ok));
    assert.equal(code, 0, log);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack ?? e)));
    await page.goto(k.url + '/#view=host&host=load-web&range=1m');
    await page.waitForFunction(() => window.__kansoku.loadRuns >= 1 && document.querySelectorAll('#loadruns .uplot').length >= 2, null, { timeout: 30000 });
    assert.match(await page.textContent('#loadruns h2'), /Load runs in range \(1: e2e-run\)/);
    const titles = await page.$$eval('#loadruns .u-title', (ts) => ts.map((t) => t.textContent));
    assert.ok(titles.includes('Load runs: responses per interval') && titles.some((t) => t.startsWith('Load runs: latency')), JSON.stringify(titles));
    // The run's responses as stored: what the section draws from.
    const r = await (await fetch(`${k.url}/prometheus/api/v1/query?query=${encodeURIComponent('sum(sum_over_time(load_responses{run="e2e-run"}[5m]))')}`)).json();
    assert.ok(Number(r.data.result[0]?.value[1]) > 0, JSON.stringify(r));
    await page.locator('#loadruns').screenshot({ path: OUT + 'host-load-runs.png' });
    assert.deepEqual(errors, []);
  } finally {
    await k.stop();
  }
});

test('the labs\' reports, as a reader sees them: the latency curve, the limits beside theory, an experiment', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kansoku-e2e-labs-'));
  const run = (args) => new Promise((ok, fail) => {
    const p = spawn(BIN, ['lab', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    p.stderr.on('data', (d) => { log += d; });
    p.on('exit', (c) => (c === 0 ? ok() : fail(new Error(`lab ${args[0]} exited ${c}: ${log}`))));
  });
  try {
    // A closed loop of preads, 2 and 10 µs added to each (seed 003's curve).
    writeFileSync(join(dir, 'loop.py'), "import os, time\nfd = os.open('/dev/zero', os.O_RDONLY)\nn = 0\nend = time.monotonic() + 0.3\n" +
      "while time.monotonic() < end:\n    os.pread(fd, 8, 0)\n    n += 1\nprint('ops=%d' % (n / 0.3))\n");
    await run(['latency', '--run', `python3 ${join(dir, 'loop.py')}`, '--parser', 'ops=(\\d+)', '--metric', 'ops', '--calls', 'pread',
      '--steps', '0,2us,10us', '--repetitions', '2', '--warmup', '0', '--probe-calls', '5000', '--model', '1,1', '--hop', '2us',
      '--out', join(dir, 'latency.json')]);
    // The storage limits of a small file, beside a datasheet.
    writeFileSync(join(dir, 'sheet.toml'), 'model = "e2e"\nrpm = 7200\nzones = [{ until = 0.5, sectors_per_track = 1000 }, { until = 1.0, sectors_per_track = 500 }]\nread_iops = 200\n');
    await run(['limits', '--disk', join(dir, 'disk.img'), '--disk-size', '128M', '--datasheet', join(dir, 'sheet.toml'), '--positions', '4',
      '--position-span', '8M', '--sizes', '512,4K,1M', '--size-time', '200ms', '--depths', '1,4', '--depth-time', '300ms', '--writes', '100',
      '--cpu-time', '200ms', '--memory', '32M', '--out', join(dir, 'limits.json')]);
    // An experiment: two settings, four repetitions each.
    writeFileSync(join(dir, 'exp.toml'), 'name = "e2e"\n[parameters]\nx = [1, 2]\n[workload]\nrun = "echo value=$(( {x} * 10 + {rep} ))"\n' +
      "parser = { kind = \"regex\", metrics = { v = 'value=(\\d+)' } }\nrepetitions = 4\nwarmup = 1\n");
    await run(['run', join(dir, 'exp.toml'), '--out', join(dir, 'run.json'), '--seed', '7']);
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    for (const name of ['latency', 'limits', 'run']) {
      await page.goto('file://' + join(dir, `${name}.html`));
      // Every chart a reader is meant to read has its axes labelled.
      const svgs = await page.$$eval('svg', (ss) => ss.map((s) => s.querySelectorAll('text').length));
      assert.ok(svgs.length >= 1 && svgs.every((n) => n >= 2), `${name}: ${JSON.stringify(svgs)} labels per chart`);
      await page.screenshot({ path: OUT + `lab-${name}.png`, fullPage: true });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
