// Starts the real kansoku binary on a free loopback port and waits for its
// "listening on" log line (no sleeps); stops it on request.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/// The release binary: KANSOKU_BIN, else where cargo puts it (which honours
/// CARGO_TARGET_DIR and .cargo/config), not a guessed ./target.
function cargoBin() {
  const meta = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'],
    { cwd: resolve(import.meta.dirname, '../..'), encoding: 'utf8' }));
  return join(meta.target_directory, 'release', 'kansoku');
}
export const BIN = process.env.KANSOKU_BIN ?? cargoBin();
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--enable-precise-memory-info'];

/// `data`: a data directory an earlier server left (`stop({ keep: true })`).
export async function startKansoku(args, { data = mkdtempSync(join(tmpdir(), 'kansoku-e2e-')) } = {}) {
  const child = spawn(BIN, [...args, '--data', data, '--listen', '127.0.0.1:0', '--fsync', 'never'],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, KANSOKU_LOG: 'info' } });
  let log = '';
  const url = await new Promise((ok, fail) => {
    child.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/[\d.:]+)/.exec(log);
      if (m) ok(m[1]);
    });
    child.on('exit', (code) => fail(new Error(`kansoku exited (${code}) before listening:\n${log}`)));
  });
  return {
    url,
    data,
    pid: child.pid,
    log: () => log,
    async stop({ keep = false } = {}) {
      const done = new Promise((ok) => child.on('exit', ok));
      child.kill('SIGTERM');
      await done;
      if (!keep) rmSync(data, { recursive: true, force: true });
    },
  };
}
