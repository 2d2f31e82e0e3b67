/**
 * The format registry: every stored form of a linear weight the tool reads, one entry each (DESIGN §3,
 * spec/fp4-formats.md). An entry says how the form is recognised from what is stored (tensor suffixes and
 * dtypes), its logical shape, its block and scale codes, the second (global) scale if any, the exact
 * dequantization formula, the device kind that decodes it, its NaN codes and which injected faults can
 * touch it. Every consumer — loader, reference and device dequantization, weights-first check, inspect,
 * FP16 cache, fixtures, fault plan, diagnosis — asks this table instead of knowing a format itself.
 *
 * A family is what the decoders implement (E2M1 × E8M0 blocks of 32, E2M1 × E4M3 blocks of 16 × a global
 * scale, E4M3 × tiles, plain floats); several producers' entries share one family and differ only in names.
 */
import type { FaultId } from '../faults/plan.js';
import type { DType } from './dtypes.js';

/** What the decoders implement. */
export type LinearFormat = 'plain' | 'fp8-block' | 'mxfp4' | 'nvfp4' | 'bnb4';

export type FormatId = 'plain' | 'fp8-block' | 'deepseek-mxfp4' | 'quark-mxfp4' | 'ct-mxfp4' | 'modelopt-nvfp4' | 'ct-nvfp4' | 'gpt-oss-mxfp4' | 'bnb-nf4' | 'bnb-fp4';

/** Scale element codes ('u8-codes': bitsandbytes' double-quantized absmax, decoded through its nested table). */
export type ScaleCode = 'e8m0' | 'e4m3' | 'f32' | 'u8-codes';

export interface FormatEntry {
  id: FormatId;
  family: LinearFormat;
  /** who writes it, for the README and inspect */
  producer: string;
  /** the weight tensor's suffix after the module name, and its stored dtypes */
  weight: { suffix: string; dtypes: readonly DType[] };
  /** FP4 packs two elements a byte (stored [out, in/2]); FP8 and plain store [out, in] */
  packed: boolean;
  /** low-even: byte = q[2k] | q[2k+1] << 4; high-even (bitsandbytes): byte = q[2k] << 4 | q[2k+1] */
  nibble: 'low-even' | 'high-even' | null;
  /** codes laid out per row ([out, in/2]) or over the flattened tensor (bitsandbytes: [(out·in+1)/2, 1]) */
  layout?: 'rows' | 'flat';
  /** a tensor beside the weight that only this entry stores (bitsandbytes' quant_state names the code table) */
  marker?: string;
  /** the other tensors beside the weight and what they hold (for inspect; the loader reads them) */
  extra?: readonly { suffix: string; role: string }[];
  /** scale tensor suffixes tried in order, their dtypes and code; null for plain */
  scale: { suffixes: readonly string[]; dtypes: readonly DType[] } | null;
  /** [rows, cols] one scale covers; 'config' = quantization_config.weight_block_size (FP8 tiles) */
  block: [number, number] | 'config';
  /** the per-tensor second scale: a multiplier (ModelOpt) or a divisor (compressed-tensors) */
  global: { suffix: string; op: 'mul' | 'div' } | null;
  /** the formula, as the README prints it */
  formula: string;
  /** the native kind (device-hip/binding.ts DEQUANT_KINDS) that decodes it */
  deviceKind: 'mxfp4' | 'nvfp4' | 'fp8-block' | 'plain' | 'bnb4';
  /** stored codes that are NaN: bad input */
  nanCodes: string;
  /** weight faults (DESIGN §9) that can show in this family; any other is a no-op on it */
  faults: readonly FaultId[];
}

const MX_FAULTS: readonly FaultId[] = ['e3m0-table', 'nibble-swap', 'scale-missing', 'scale-axis', 'scale-stride', 'e8m0-as-int', 'code-table'];
const NV_FAULTS: readonly FaultId[] = ['e3m0-table', 'nibble-swap', 'scale-missing', 'scale-axis', 'scale-stride', 'global-scale-inverted', 'e4m3-scale-as-e8m0', 'scale-block-size', 'code-table'];
/** bitsandbytes: one flat absmax per block, so no grid to misread; its own table and its double quant instead */
const BNB_FAULTS: readonly FaultId[] = ['nibble-swap', 'scale-missing', 'code-table', 'nested-absmax-raw'];
const BNB_FORMULA = 'quant_map[code] · absmax[⌊j/blocksize⌋] over the flattened tensor, absmax = nested_quant_map[a] · nested_absmax[⌊b/256⌋] + nested_offset with double quant';
const bnbExtra = (t: 'nf4' | 'fp4') => [
  { suffix: 'weight.quant_map', role: 'bitsandbytes code table (quant_map)' },
  { suffix: 'weight.nested_absmax', role: 'double-quant absmax scale' },
  { suffix: 'weight.nested_quant_map', role: 'double-quant code table' },
  { suffix: `weight.quant_state.bitsandbytes__${t}`, role: 'quant_state JSON' },
];
const MX_FORMULA = 'E2M1[nib] · 2^(s − 127), s the E8M0 byte of the row\'s 32-block';

export const FORMATS: readonly FormatEntry[] = [
  {
    id: 'plain', family: 'plain', producer: 'any (BF16/F16/F32)',
    weight: { suffix: 'weight', dtypes: ['BF16', 'F16', 'F32'] }, packed: false, nibble: null, scale: null, block: [1, 1], global: null,
    formula: 'the stored float', deviceKind: 'plain', nanCodes: 'NaN floats', faults: [],
  },
  {
    id: 'fp8-block', family: 'fp8-block', producer: 'DeepSeek (V3/R1/V4 FP8 blocks)',
    weight: { suffix: 'weight', dtypes: ['F8_E4M3'] }, packed: false, nibble: null,
    scale: { suffixes: ['scale', 'weight_scale_inv'], dtypes: ['F8_E8M0', 'U8', 'F32']}, block: 'config', global: null,
    formula: 'E4M3(w) · s, one s (E8M0 or F32) per weight_block_size tile', deviceKind: 'fp8-block', nanCodes: 'E4M3 0x7F/0xFF, E8M0 0xFF, NaN F32 scales',
    faults: ['scale-missing', 'scale-axis', 'scale-stride', 'e8m0-as-int'],
  },
  {
    id: 'deepseek-mxfp4', family: 'mxfp4', producer: 'DeepSeek V4 (routed experts)',
    weight: { suffix: 'weight', dtypes: ['I8', 'U8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['scale'], dtypes: ['F8_E8M0', 'U8']}, block: [1, 32], global: null,
    formula: MX_FORMULA, deviceKind: 'mxfp4', nanCodes: 'E8M0 0xFF', faults: MX_FAULTS,
  },
  {
    id: 'quark-mxfp4', family: 'mxfp4', producer: 'AMD Quark (fp4 per_group 32, e8m0)',
    weight: { suffix: 'weight', dtypes: ['U8', 'I8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['weight_scale'], dtypes: ['U8', 'F8_E8M0']}, block: [1, 32], global: null,
    formula: MX_FORMULA, deviceKind: 'mxfp4', nanCodes: 'E8M0 0xFF', faults: MX_FAULTS,
  },
  {
    id: 'ct-mxfp4', family: 'mxfp4', producer: 'llm-compressor (compressed-tensors mxfp4-pack-quantized)',
    weight: { suffix: 'weight_packed', dtypes: ['U8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['weight_scale'], dtypes: ['U8', 'F8_E8M0']}, block: [1, 32], global: null,
    formula: MX_FORMULA, deviceKind: 'mxfp4', nanCodes: 'E8M0 0xFF', faults: MX_FAULTS,
  },
  {
    id: 'modelopt-nvfp4', family: 'nvfp4', producer: 'NVIDIA ModelOpt (quant_algo NVFP4)',
    weight: { suffix: 'weight', dtypes: ['U8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['weight_scale'], dtypes: ['F8_E4M3'] }, block: [1, 16], global: { suffix: 'weight_scale_2', op: 'mul' },
    formula: 'E2M1[nib] · (E4M3(s) · weight_scale_2), s per 16 inputs of a row', deviceKind: 'nvfp4', nanCodes: 'E4M3 0x7F/0xFF scales, NaN/Inf/≤0 weight_scale_2', faults: NV_FAULTS,
  },
  {
    id: 'ct-nvfp4', family: 'nvfp4', producer: 'llm-compressor (compressed-tensors nvfp4-pack-quantized)',
    weight: { suffix: 'weight_packed', dtypes: ['U8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['weight_scale'], dtypes: ['F8_E4M3'] }, block: [1, 16], global: { suffix: 'weight_global_scale', op: 'div' },
    formula: 'E2M1[nib] · (E4M3(s) / weight_global_scale), s per 16 inputs of a row', deviceKind: 'nvfp4', nanCodes: 'E4M3 0x7F/0xFF scales, NaN/Inf/≤0 weight_global_scale', faults: NV_FAULTS,
  },
  ...(['nf4', 'fp4'] as const).map((t): FormatEntry => ({
    id: `bnb-${t}`, family: 'bnb4', producer: `bitsandbytes 4-bit (${t}, as transformers saves it)`,
    weight: { suffix: 'weight', dtypes: ['U8'] }, packed: true, nibble: 'high-even', layout: 'flat', marker: `weight.quant_state.bitsandbytes__${t}`, extra: bnbExtra(t),
    scale: { suffixes: ['weight.absmax'], dtypes: ['F32', 'U8'] }, block: [1, 64], global: null,
    formula: BNB_FORMULA, deviceKind: 'bnb4', nanCodes: 'NaN/Inf absmax, quant_map or nested values', faults: BNB_FAULTS,
  })),
];

/**
 * Stored forms that hold many linears in one tensor, bound by their architecture (not found by module suffix):
 * gpt-oss's experts, `<base>_blocks` U8 [E, rows, in/32, 16] with `<base>_scales` [E, rows, in/32]
 * (spec/fp4-formats.md §4), one LinearWeight per expert (harness/models/gpt_oss.ts). The weights-first check
 * and every consumer then treat each expert as any MXFP4 linear.
 */
export const FUSED_FORMATS: readonly FormatEntry[] = [
  {
    id: 'gpt-oss-mxfp4', family: 'mxfp4', producer: 'OpenAI gpt-oss (quant_method mxfp4, experts only)',
    weight: { suffix: '_blocks', dtypes: ['U8'] }, packed: true, nibble: 'low-even',
    scale: { suffixes: ['_scales'], dtypes: ['U8', 'F8_E8M0'] }, block: [1, 32], global: null,
    formula: MX_FORMULA, deviceKind: 'mxfp4', nanCodes: 'E8M0 0xFF', faults: MX_FAULTS,
  },
];

export function formatEntry(id: FormatId): FormatEntry {
  return [...FORMATS, ...FUSED_FORMATS].find((f) => f.id === id)!;
}

/** Weight tensor suffixes any entry stores under (a module's weight is `<module>.<suffix>`). */
export const WEIGHT_SUFFIXES: readonly string[] = [...new Set(FORMATS.map((f) => f.weight.suffix))];

/** Tensors that belong to a linear beside its weight (scales, global scales), by suffix. */
export const SIDE_SUFFIXES: readonly string[] = [...new Set(FORMATS.flatMap((f) => [...(f.scale?.suffixes ?? []), ...(f.global ? [f.global.suffix] : []), ...(f.extra ?? []).map((x) => x.suffix)]))];

/** Faults that apply to at least one quantized family: the weight faults of the catalog. */
export function faultApplies(fault: FaultId, family: LinearFormat, scaleCode: ScaleCode | null): boolean {
  if (fault === 'e8m0-as-int' && scaleCode === 'f32') return false;
  if (fault === 'nested-absmax-raw' && scaleCode !== 'u8-codes') return false;
  return FORMATS.some((f) => f.family === family && f.faults.includes(fault));
}
