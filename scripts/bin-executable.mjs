// tsc writes dist/ files with mode 0644; the package's bin must be executable, or `npx layerdiff` from a
// fresh checkout fails with "Permission denied" (npm marks bins executable only for installed packages).
import * as fs from 'node:fs';
import { URL } from 'node:url';

const pkg = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
for (const file of Object.values(pkg.bin ?? {})) {
  const p = new URL(`../${file}`, import.meta.url);
  fs.chmodSync(p, fs.statSync(p).mode | 0o111);
}
