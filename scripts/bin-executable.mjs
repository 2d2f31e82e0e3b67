// tsc writes dist/ files with mode 0644; the package's bin must be executable, or `npx layerdiff` from a
// fresh checkout fails with "Permission denied" (npm marks bins executable only for installed packages).
//
// npm also never links a package's own bin into its own node_modules/.bin, so `npx layerdiff` in a
// checkout finds nothing local, installs the checkout into npx's cache and runs `prepare` (the whole
// native + TypeScript build) there again, once per clone path (~30 s) before printing anything. A
// relative link node_modules/.bin/<name> → ../../<bin> is what npx looks for first: it then starts at once.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, URL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
const binDir = path.join(root, 'node_modules', '.bin');
for (const [name, file] of Object.entries(pkg.bin ?? {})) {
  const target = path.join(root, file);
  fs.chmodSync(target, fs.statSync(target).mode | 0o111);
  if (!fs.existsSync(path.join(root, 'node_modules'))) continue; // not installed yet: npm ci runs this again
  fs.mkdirSync(binDir, { recursive: true });
  const link = path.join(binDir, name);
  const rel = path.relative(binDir, target);
  let current = null;
  try {
    current = fs.readlinkSync(link);
  } catch {
    // absent, or a file that is not a link
  }
  if (current === rel) continue;
  fs.rmSync(link, { force: true });
  if (process.platform === 'win32') fs.writeFileSync(`${link}.cmd`, `@node "%~dp0\\${rel}" %*\r\n`);
  else fs.symlinkSync(rel, link);
}
