// The host view's weight on the server (issue 44's budgets): `kansoku up`
// observing this machine (--perf 1000 --perf-callchain, 100 ms): --warmup
// seconds to settle, --baseline seconds with no page open, the host view
// open in headless Chromium (range 15m) for --minutes, then --baseline
// seconds with the page closed again. Reports the server's CPU (utime +
// stime of the whole process, as top sees it) in each phase and the view's
// cost (open less the mean of the two baselines), the bytes the page received per second (every response
// and the live stream, from Chromium's network events), the longest wait
// between two live redraws, and at the end how long a 15-minute flame graph
// takes to answer and to appear in a fresh page; then, the server restarted
// on the same data (nothing kept), how long it takes to appear and to be
// complete.
// Usage: node e2e/bench-host.mjs [--minutes 15] [--warmup 120] [--baseline 60] [--perf 1000]
import { chromium } from 'playwright-core';
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { startKansoku, CHROMIUM, CHROMIUM_ARGS } from './server.mjs';

const arg = (k, d) => { const i = process.argv.indexOf(`--${k}`); return i > 0 ? process.argv[i + 1] : d; };
const minutes = +arg('minutes', 15), baseline = +arg('baseline', 60), warmup = +arg('warmup', 120), hz = arg('perf', '1000');
const TICK = 100; // clock ticks a second (USER_HZ)
const cpuOf = (pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (+f[11] + +f[12]) / TICK; // utime + stime, seconds
};
// The threads that answer requests (the HTTP runtime's workers, its
// blocking pool, the symbolizer): what the view costs directly, apart from
// the collectors, whose cost moves with what the machine runs. Taken as the
// whole process less its long-lived other threads (the blocking pool's
// threads end after 10 s idle, and an ended thread's time is gone from
// /proc/PID/task but kept in /proc/PID/stat).
const apiCpuOf = (pid) => cpuOf(pid) - readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
  try {
    const s = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
    const comm = s.slice(s.indexOf('(') + 1, s.lastIndexOf(')'));
    if (/^tokio-r|^symbolizer/.test(comm)) return sum;
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return sum + (+f[11] + +f[12]) / TICK;
  } catch { return sum; }
}, 0);
const period = (ms) => new Promise((ok) => setTimeout(ok, ms)); // a measuring period, not synchronisation
const UP = ['up', '--host', 'bench', '--interval', '100ms', '--perf', hz, '--perf-callchain'];
// The browser first: if it cannot start, no server is left running (one
// left from such a failure ran through a later run on 2026-11-28).
const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
let k = await startKansoku(UP);
try {
  // The server's first minute is not its steady state: it copies every
  // mapped binary it samples (Chromium's too) into its build-id cache.
  console.error(`bench-host: ${warmup} s to settle, then a baseline of ${baseline} s without a page`);
  await period(warmup * 1000);
  let c0 = cpuOf(k.pid), a0 = apiCpuOf(k.pid), t0 = Date.now();
  await period(baseline * 1000);
  const idle = (cpuOf(k.pid) - c0) / ((Date.now() - t0) / 1000), apiIdle = (apiCpuOf(k.pid) - a0) / ((Date.now() - t0) / 1000);
  console.error(`bench-host: without a browser the server used ${(100 * idle).toFixed(2)} % of a core`);

  const page = await browser.newPage({ viewport: { width: 1600, height: 1200 } });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  let bytes = 0;
  cdp.on('Network.dataReceived', (e) => { bytes += e.encodedDataLength || e.dataLength; });
  // Each request's path and time to its last byte, summed by path: which
  // sections the server's time goes to (the live stream, never finished,
  // is not among them).
  const asked = new Map(), byPath = {};
  cdp.on('Network.requestWillBeSent', (e) => { if (e.request.url.startsWith('http')) asked.set(e.requestId, { path: new URL(e.request.url).pathname, t: e.timestamp }); });
  cdp.on('Network.loadingFinished', (e) => {
    const r = asked.get(e.requestId);
    if (!r) return;
    asked.delete(e.requestId);
    const p = (byPath[r.path] ??= { requests: 0, seconds: 0, longest_s: 0, kib: 0 });
    const s = e.timestamp - r.t;
    p.requests++; p.seconds += s; p.longest_s = Math.max(p.longest_s, s); p.kib += e.encodedDataLength / 1024;
  });
  await page.goto(`${k.url}/#view=host&host=bench&range=15m`);
  await page.waitForFunction(() => window.__kansoku.updates > 10, null, { timeout: 120000 });
  console.error(`bench-host: the host view open for ${minutes} min`);
  const rows = [];
  c0 = cpuOf(k.pid); a0 = apiCpuOf(k.pid); t0 = Date.now();
  let b0 = bytes;
  const start = Date.now();
  while (Date.now() - start < minutes * 60000) {
    await period(30000);
    const s = await page.evaluate(() => { const k = window.__kansoku; const g = k.maxGapMs; k.maxGapMs = 0; return { gap: g, updates: k.updates }; });
    const now = Date.now(), cpu = cpuOf(k.pid), api = apiCpuOf(k.pid);
    const row = { t_s: Math.round((now - start) / 1000), server_cpu_pct: 100 * (cpu - c0) / ((now - t0) / 1000),
      api_threads_pct: Math.max(0, 100 * (api - a0) / ((now - t0) / 1000)),
      kib_per_s: (bytes - b0) / 1024 / ((now - t0) / 1000), longest_stall_ms: Math.round(s.gap), updates: s.updates };
    rows.push(row);
    console.error(JSON.stringify(row));
    c0 = cpu; a0 = api; t0 = now; b0 = bytes;
  }
  const open = rows.reduce((a, r) => a + r.server_cpu_pct, 0) / rows.length;
  // The baseline again with the page closed: the server as it runs after
  // 15 minutes (its data, its caches), without the view.
  await page.close();
  console.error(`bench-host: the page closed; ${baseline} s without it`);
  c0 = cpuOf(k.pid); a0 = apiCpuOf(k.pid); t0 = Date.now();
  await period(baseline * 1000);
  const after = (cpuOf(k.pid) - c0) / ((Date.now() - t0) / 1000), apiAfter = (apiCpuOf(k.pid) - a0) / ((Date.now() - t0) / 1000);
  console.error(`bench-host: after the page closed the server used ${(100 * after).toFixed(2)} % of a core`);
  // The 15-minute flame graph: the request alone, then a fresh page until it is drawn.
  const now = Date.now() / 1000;
  let t = performance.now();
  const flame = await (await fetch(`${k.url}/api/v1/profile/flame?host=bench&from=${now - 900}&to=${now}&width=1560`)).text();
  const flameMs = performance.now() - t;
  // Each request of the page until the flame graph is drawn: when it was
  // sent, its first byte and its last, ms from the document's request
  // (where the first second goes).
  const coldPage = async () => {
    const p3 = await browser.newPage({ viewport: { width: 1600, height: 1200 } });
    const cdp3 = await p3.context().newCDPSession(p3);
    await cdp3.send('Network.enable');
    const reqs = new Map();
    let t0 = null;
    const ms = (ts) => Math.round((ts - t0) * 1000);
    cdp3.on('Network.requestWillBeSent', (e) => {
      if (!e.request.url.startsWith('http')) return;
      t0 ??= e.timestamp;
      const u = new URL(e.request.url);
      reqs.set(e.requestId, { path: u.pathname + (u.pathname.includes('profile') ? u.search.replace(/.*(within=[^&]*).*/, ' $1') : ''), sent: ms(e.timestamp) });
    });
    cdp3.on('Network.responseReceived', (e) => { const r = reqs.get(e.requestId); if (r) r.first_byte = ms(e.timestamp); });
    cdp3.on('Network.loadingFinished', (e) => { const r = reqs.get(e.requestId); if (r) r.done = ms(e.timestamp); });
    const t = performance.now();
    await p3.goto(`${k.url}/#view=host&host=bench&range=15m`);
    const appears = await p3.waitForFunction(() => document.querySelectorAll('#flame .fr').length > 0, null, { timeout: 120000 })
      .then(() => Math.round(performance.now() - t), () => null);
    const timeline = [...reqs.values()].filter((r) => r.sent <= (appears ?? 0) + 50);
    const complete = await p3.waitForFunction(() => window.__kansoku.flameComplete, null, { timeout: 300000 })
      .then(() => Math.round(performance.now() - t), () => null);
    await p3.close();
    return [appears, complete, timeline];
  };
  // Reported as null when it did not appear within two minutes.
  const [appearMs, , warmRequests] = await coldPage();
  // Cold: the same data under a restarted server, which has named and kept
  // nothing (a server no page has looked at): a fresh page until the flame
  // graph first appears (the newest stretch the server named within the
  // page's `within`), and until it holds the whole range.
  // Twice: a page opened the moment the restarted server listens (its
  // tracer still loading, its first rounds not stored), and one opened on a
  // server restarted again and settled — 10 s of rounds stored — that no
  // page has asked for a profile (a server left running that nobody looked
  // at: what the budget is about).

  await k.stop({ keep: true });
  k = await startKansoku(UP, { data: k.data });
  const [restartAppears, restartComplete] = await coldPage();
  await k.stop({ keep: true });
  k = await startKansoku(UP, { data: k.data });
  for (;;) {
    const s = await (await fetch(`${k.url}/api/v1/status`)).json();
    if ((s.collector?.rounds ?? 0) * (s.collector?.interval_seconds ?? 1) >= 10) break;
    await period(250);
  }
  console.error('bench-host: restarted and settled (10 s of rounds stored)');
  const [coldAppears, coldComplete, coldRequests] = await coldPage();
  const out = {
    minutes, warmup_s: warmup, baseline_s: baseline, perf_hz: +hz, rows, chromium: browser.version(),
    // The view's cost: open less the mean of the two baselines around it.
    server_cpu_pct: { without_browser: 100 * idle, without_after: 100 * after, with_host_view: open,
      view_costs: open - 50 * (idle + after) },
    // The request-answering threads alone, in the same three phases.
    api_threads_pct: { without_browser: 100 * apiIdle, with_host_view: rows.reduce((a, r) => a + r.api_threads_pct, 0) / rows.length,
      without_after: 100 * Math.max(0, apiAfter) },
    kib_per_s: rows.reduce((a, r) => a + r.kib_per_s, 0) / rows.length,
    longest_stall_ms: Math.max(...rows.map((r) => r.longest_stall_ms)),
    // Per path while the view was open: requests, seconds answering them
    // (summed), the longest, KiB received.
    requests: Object.fromEntries(Object.entries(byPath).sort((a, b) => b[1].seconds - a[1].seconds)),
    flame_15m: { answer_ms: Math.round(flameMs), bytes: flame.length, appears_ms: appearMs === null ? null : Math.round(appearMs),
      cold_appears_ms: coldAppears, cold_complete_ms: coldComplete,
      restarted_appears_ms: restartAppears, restarted_complete_ms: restartComplete,
      cold_requests_ms: coldRequests, warm_requests_ms: warmRequests },
  };
  mkdirSync('e2e-out', { recursive: true });
  writeFileSync('e2e-out/bench-host.json', JSON.stringify(out, null, 1));
  const { rows: _, ...summary } = out;
  console.log(JSON.stringify(summary));
} finally {
  await browser.close();
  await k.stop();
}
