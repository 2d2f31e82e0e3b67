/**
 * `npm run gen:ops`: writes the sources generated from the op table (device-hip/ops/table.ts). Run it after
 * editing the table; device-hip/test/op_table.test.ts fails while a generated file is stale.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { generate } from '../device-hip/ops/generate.js';

// dist/scripts/gen-ops.js → the repository root (only the table and the generator are compiled for it: tsconfig.gen.json)
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

for (const [rel, text] of generate()) {
  const file = path.join(root, rel);
  const old = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
  if (old === text) continue;
  fs.writeFileSync(file, text);
  console.log(`wrote ${rel}`);
}
