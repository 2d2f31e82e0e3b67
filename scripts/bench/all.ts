/**
 * `npm run bench`: every benchmark, each printing ratios measured side by side in one run.
 * `npm run bench -- --wide` adds the real-width DeepSeek-V4 benchmarks: the weights check per layer, the streaming diff (writes ~9 and ~17 GB)
 * and generation (a 4-layer, 32-expert checkpoint of ~4.2 GB and its ~9.1 GB FP16 cache), and gpt-oss at
 * gpt-oss-20b's widths (2 and 4 layers, ~3.3 and ~4.2 GB): diff per layer, peak RSS, decode KV cache vs recompute;
 * and how fast a large read is mapped or copied on this host (mapped_reads.ts).
 * LAYERDIFF_SIMD=avx2 runs every kernel at its AVX2 level (harness/io/addon.ts): this machine measured as a host
 * without AVX-512, such as the Zen 3 EPYCs many MI250 nodes carry.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { benchGemm } from './gemm.js';
import { benchDequantFormats } from './dequant_formats.js';
import { benchWeightsCheck } from './weights_check.js';
import { benchDiff } from './diff.js';
import { benchVerdict } from './verdict.js';
import { benchGenerate } from './generate.js';
import { benchGenerateDeepseek, wideGenerationModel } from './generate_deepseek.js';
import { benchGenerateGptOss } from './generate_gpt_oss.js';
import { benchGptOssWide } from './gpt_oss_wide.js';
import { benchMappedReads } from './mapped_reads.js';
import { rerunAsTheCli } from './as_cli.js';
import { simdLevel } from '../../harness/io/addon.js';

// the whole run in a child with the CLI's environment (glibc malloc on huge pages), as `layerdiff diff` runs
if (!rerunAsTheCli()) {
  console.log(`SIMD level: ${simdLevel()} (LAYERDIFF_SIMD)`);
  const wide = process.argv.includes('--wide');
  console.log('== GEMM and dequant ==');
  await benchGemm();
  console.log('\n== dequantization per format, against memcpy ==');
  await benchDequantFormats();
  console.log('\n== the weights-first check, against memcpy ==');
  await benchWeightsCheck(wide);
  console.log('\n== whole diff ==');
  await benchDiff(wide);
  console.log('\n== the verdict: extra mode and floor pass ==');
  await benchVerdict();
  console.log('\n== generation ==');
  await benchGenerate();
  await benchGenerateDeepseek(wide);
  await benchGenerateGptOss();
  if (wide) {
    console.log('\n== gpt-oss at gpt-oss-20b widths ==');
    await benchGptOssWide();
    // a file just written (its page cache fresh) and the FP16 cache's head, written by the generation bench
    console.log('\n== large reads: mapped or copied into a warm buffer ==');
    benchMappedReads();
    const head = path.join(`${wideGenerationModel()}.fp16`, 'head.safetensors');
    if (fs.existsSync(head)) benchMappedReads(head);
  }
}
