/**
 * What `layerdiff faults` and `layerdiff fixture --help` list: the simulated device-path bugs (DESIGN §9, one
 * line each: what goes wrong, its signature) and the fixture kinds. The ids come from their registries
 * (FAULT_IDS, FIXTURE_KINDS), so a fault or kind added there is listed at once; a missing text says so.
 */
import { FAULT_IDS } from '../faults/plan.js';
import { FIXTURE_KINDS } from '../../fixtures/generate.js';

/** DESIGN §9's table: what goes wrong · the signature the diagnosis looks for. */
const FAULT_TEXT: Record<string, string> = {
  'e3m0-table': 'FP4 nibbles decoded as E3M0 instead of E2M1 · positive weights too large, repeated tokens',
  'nibble-swap': 'high/low nibble order swapped · local error spike in every FP4 matmul',
  'scale-missing': 'block scales ignored (.to(float16) on the codes) · magnitudes off by 2^(e−127)',
  'scale-axis': 'scale broadcast along the wrong axis / wrong layer\'s scale · spike in one layer',
  'scale-stride': 'E8M0 scale read with the wrong stride · garbage in the affected rows',
  'fp16-overflow': 'attention scores or activations overflow FP16 · Inf then NaN',
  'e8m0-as-int': 'scale byte used as a number instead of 2^(e−127) · huge magnitudes',
  'global-scale-inverted': 'NVFP4 second-level scale multiplied where it divides (or the reverse) · every block off by g²',
  'scale-block-size': '16-wide NVFP4 blocks read as 32 · half the blocks scaled by a neighbour\'s scale',
  'e4m3-scale-as-e8m0': 'an E4M3 block scale decoded as E8M0 · magnitudes off by large powers of two',
  'code-table': 'bitsandbytes codes decoded with E2M1, or E2M1 codes with NF4 · every weight wrong, magnitudes off by up to 6×',
  'nested-absmax-raw': 'bitsandbytes double-quant absmax codes used as values · blocks scaled by 0…255, overflow to Inf',
  'fp16-accumulate': 'matrix products accumulate in FP16 (wrong BLAS compute type) · isolated error far above the FP16 floor, growing with k',
  'rope-angle-fp16': 'RoPE angles t·θ computed in FP16 · error growing with position',
  'router-bias-dropped': 'experts selected without the selection bias · flips at margins far beyond the score error; forced-choice stages pass',
};

const FIXTURE_TEXT: Record<string, string> = {
  'llama-tiny': 'Llama, 4 layers, MXFP4 + FP8-block + BF16 weights, 2 shards, byte-level BPE tokenizer (1.6 MB; the default model of diff)',
  'llama-tiny-overflow': 'llama-tiny with activations that leave FP16\'s range in layer 2 (fails without any injected fault)',
  'llama-tiny-bias': 'llama-tiny with attention_bias and mlp_bias: every projection carries a BF16 .bias',
  'deepseek-v4-tiny': 'DeepSeek-V4-Flash, 4 layers: hyper-connections, compressed sparse attention with indexer, MXFP4 MoE (4.6 MB)',
  'deepseek-v4-wide': 'DeepSeek-V4-Flash at real widths (hidden 4096, 256 experts, vocab 129,280), 2 layers, ~8.7 GB: for benchmarks',
  'gpt-oss-tiny': 'gpt-oss, 4 layers alternating sliding/full attention with sinks, 8 MXFP4 experts top-2, YaRN (1.2 MB)',
  'gpt-oss-wide': 'gpt-oss at gpt-oss-20b\'s widths (hidden 2880, 32 MXFP4 experts of [5760×2880], vocab 201,088), 2 layers, ~3.3 GB: for benchmarks',
};

export function faultLines(): string[] {
  const w = Math.max(...FAULT_IDS.map((f) => f.length));
  return FAULT_IDS.map((f) => `${f.padEnd(w)}  ${FAULT_TEXT[f] ?? '(no description in the catalog yet)'}`);
}

export function fixtureKinds(): string[] {
  return Object.keys(FIXTURE_KINDS);
}

export function fixtureLines(): string[] {
  const kinds = fixtureKinds();
  const w = Math.max(...kinds.map((k) => k.length));
  return kinds.map((k) => `  ${k.padEnd(w)}  ${FIXTURE_TEXT[k] ?? '(no description yet)'}`);
}
