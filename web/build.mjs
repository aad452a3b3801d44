// Builds the dashboard into dist/ (embedded by the api crate) and, with
// --tests, the unit tests into dist-test/ for `node --test`.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';

mkdirSync('dist', { recursive: true });
await build({
  entryPoints: { app: 'src/main.ts' }, bundle: true, minify: !process.env.NOMINIFY, sourcemap: false,
  format: 'iife', target: 'es2022', outdir: 'dist', logLevel: 'warning',
});
copyFileSync('src/index.html', 'dist/index.html');
if (process.argv.includes('--tests')) {
  await build({
    entryPoints: readdirSync('test').filter((f) => f.endsWith('.test.ts')).map((f) => `test/${f}`),
    bundle: true, platform: 'node', format: 'esm', outdir: 'dist-test', outExtension: { '.js': '.mjs' }, logLevel: 'warning',
  });
}
