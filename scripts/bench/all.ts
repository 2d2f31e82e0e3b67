/**
 * `npm run bench`: every benchmark, each printing ratios measured side by side in one run.
 * `npm run bench -- --wide` adds the real-width DeepSeek-V4 streaming benchmark (writes ~9 and ~17 GB).
 */
import { benchGemm } from './gemm.js';
import { benchDiff } from './diff.js';
import { benchGenerate } from './generate.js';

const wide = process.argv.includes('--wide');
console.log('== GEMM and dequant ==');
await benchGemm();
console.log('\n== whole diff ==');
await benchDiff(wide);
console.log('\n== generation ==');
await benchGenerate();
