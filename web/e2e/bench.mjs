// The dashboard at cluster scale: `kansoku lab synth` (256 hosts x 16 cores at
// 10 Hz by default) and the cluster view open in headless Chromium for
// --minutes; reports the per-update frame time (script work from the live
// event to uPlot's/heat map's commit) and the JS heap over time.
// Usage: node e2e/bench.mjs [--minutes 10] [--hosts 256] [--cores 16] [--view cluster|host]
import { chromium } from 'playwright-core';
import { writeFileSync, mkdirSync } from 'node:fs';
import { startKansoku, CHROMIUM, CHROMIUM_ARGS } from './server.mjs';

const arg = (k, d) => { const i = process.argv.indexOf(`--${k}`); return i > 0 ? process.argv[i + 1] : d; };
const minutes = +arg('minutes', 10), hosts = arg('hosts', '256'), cores = arg('cores', '16'), which = arg('view', 'cluster');
// The browser first: if it cannot start, no server is left running.
const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
const k = await startKansoku(['lab', 'synth', '--hosts', hosts, '--cores', cores, '--interval', '100ms']);
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const hash = which === 'host' ? '#view=host&host=synth-000&range=15m' : '#view=cluster&range=15m';
  await page.goto(k.url + '/' + hash);
  await page.waitForFunction(() => window.__kansoku.updates > 10, null, { timeout: 120000 });
  const rows = [];
  const start = Date.now();
  let lastFrames = 0;
  console.error(`bench: ${hosts} hosts x ${cores} cores, ${which} view, ${minutes} min`);
  while (Date.now() - start < minutes * 60000) {
    await page.waitForTimeout(30000); // a sampling period of the benchmark, not synchronisation
    const s = await page.evaluate(() => {
      const k = window.__kansoku;
      const frames = k.frames.splice(0);
      return { frames, updates: k.updates, heap: performance.memory.usedJSHeapSize, errors: k.errors };
    });
    const row = { t_s: Math.round((Date.now() - start) / 1000), updates: s.updates, frames: s.frames.length,
      p50_ms: q(s.frames, 0.5), p99_ms: q(s.frames, 0.99), max_ms: Math.max(...s.frames), heap_mib: s.heap / 2 ** 20 };
    rows.push(row);
    lastFrames += s.frames.length;
    console.error(JSON.stringify(row));
  }
  const status = await (await fetch(k.url + '/api/v1/status')).json();
  const all = rows.flatMap((r) => [r]);
  const out = { hosts: +hosts, cores: +cores, view: which, minutes, rows: all, frames: lastFrames,
    store: status.store, chromium: browser.version() };
  mkdirSync('e2e-out', { recursive: true });
  writeFileSync('e2e-out/bench.json', JSON.stringify(out, null, 1));
  console.log(JSON.stringify({ p50_ms: q(rows.map((r) => r.p50_ms), 0.5), worst_p99_ms: Math.max(...rows.map((r) => r.p99_ms)),
    heap_first_mib: rows[0]?.heap_mib, heap_last_mib: rows.at(-1)?.heap_mib, updates: rows.at(-1)?.updates }));
} finally {
  await browser.close();
  await k.stop();
}
