/**
 * Every test file gets its own empty cache folder (fingerprints, reused weights checks): a test never reads
 * what another test file, an earlier run or the developer's own ~/.cache/layerdiff left behind. Tests that
 * need a particular cache set LAYERDIFF_CACHE_DIR themselves.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll } from 'vitest';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-test-cache-'));
process.env.LAYERDIFF_CACHE_DIR = dir;
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
