// `npm ci` / `npm install` run `prepare`: the native addons and the TypeScript build. npm 11's npx, asked for
// this package's own bin inside a checkout, installs the checkout into its cache (a link back to this very
// folder) and runs `prepare` again — the whole build, ~30 s, once per clone path, before the first command
// prints anything. The build is skipped here when its outputs are newer than every input it reads, so that
// second `prepare` costs a directory walk and the README's first command starts at once.
// LAYERDIFF_REBUILD=1 forces the build.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, URL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Newest mtime of the files under `dirs` whose name passes `keep` (build and dependency folders skipped). */
function newest(dirs, keep) {
  let t = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (e.name === 'node_modules' || e.name === 'build' || e.name === 'dist' || e.name.startsWith('.')) continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (keep(e.name)) t = Math.max(t, fs.statSync(p).mtimeMs);
    }
  };
  for (const d of dirs) if (fs.existsSync(path.join(root, d))) walk(path.join(root, d));
  return t;
}

/** Oldest mtime of the outputs, 0 when one is missing. */
function oldest(files) {
  let t = Infinity;
  for (const f of files) {
    const p = path.join(root, f);
    if (!fs.existsSync(p)) return 0;
    t = Math.min(t, fs.statSync(p).mtimeMs);
  }
  return t;
}

const file = (f) => fs.statSync(path.join(root, f)).mtimeMs;
const nativeIn = Math.max(newest(['device-hip', 'reference-cpu'], (n) => /\.(cc|cpp|c|h|hpp|gyp)$/.test(n)), file('package.json'));
const addons = fs.existsSync(path.join(root, 'device-hip/build/Release')) ? fs.readdirSync(path.join(root, 'device-hip/build/Release')).filter((f) => f.endsWith('.node')).map((f) => `device-hip/build/Release/${f}`) : [];
const nativeOut = addons.length >= 3 ? oldest(addons) : 0;
const tsIn = Math.max(newest(['harness', 'reference-cpu', 'device-hip', 'fixtures', 'reports', 'scripts'], (n) => n.endsWith('.ts') && !n.endsWith('.test.ts')), file('tsconfig.json'), file('package.json'));
const tsOut = oldest(['dist/harness/cli/main.js']);
const force = process.env.LAYERDIFF_REBUILD === '1';

const run = (script) => {
  const r = spawnSync('npm', ['run', script], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
if (force || nativeOut < nativeIn) run('build:native');
if (force || tsOut < tsIn) run('build:ts');
else spawnSync(process.execPath, [path.join(root, 'scripts/bin-executable.mjs')], { stdio: 'inherit' });
