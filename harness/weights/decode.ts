/**
 * Alternative readings of a stored FP4/FP8 weight, each the signature of one DESIGN §9 decode bug. The
 * weights check asks which reading reproduces the device's FP16 weights bit for bit; that names the bug.
 *
 * These decoders are written here, in TypeScript, from the format definitions and the bug descriptions —
 * not by calling the native dequant with a fault code — so a match is evidence about the device's output,
 * not a tautology. (A test checks that each one agrees with the emulator's injected fault, which proves the
 * emulator models the bug that the catalog describes.)
 *
 * Every product below is exact in float64 (≤ 4 significant bits × a power of two or an 8-bit integer, or
 * 4 × 24 bits for F32 scales) and rounds once to float32 when stored, as the device's f32 multiply does;
 * then once to FP16 (round to nearest even, overflow to Inf).
 */
import { E2M1_VALUES, E4M3_TABLE, E8M0_TABLE, f32ToF16Bits, NF4_VALUES } from '../formats/dtypes.js';
import { type LinearWeight, scaleCodeOf } from '../formats/linear.js';
import { faultApplies } from '../formats/registry.js';

/** The catalog ids a weight reading can name (fp16-overflow is an activation bug, see compare/diagnose.ts). */
export const WEIGHT_CAUSES = ['e3m0-table', 'nibble-swap', 'scale-missing', 'scale-axis', 'scale-stride', 'e8m0-as-int', 'global-scale-inverted', 'e4m3-scale-as-e8m0', 'scale-block-size', 'code-table', 'nested-absmax-raw'] as const;
export type WeightCause = (typeof WEIGHT_CAUSES)[number];

export interface Reading {
  /**
   * FP4 element table: the format's own (E2M1; bitsandbytes' stored quant_map), the buggy E3M0 one
   * (c&7 = 0 → 0, else 2^((c&7)−1)), or the other family's (bitsandbytes codes as E2M1, E2M1 codes as NF4)
   */
  table: 'e2m1' | 'e3m0' | 'other-family';
  /** element 2j taken from the high nibble, 2j+1 from the low */
  swap: boolean;
  /** where scale (r, c) of an [R, C] grid is read: row-major, as if stored transposed, or with row stride C+1 */
  index: 'row-major' | 'transposed' | 'stride+1' | 'block-32';
  /** scale value: 2^(b−127), ignored (1.0), or the byte as an integer */
  scale: 'e8m0' | 'one' | 'int' | 'e4m3-as-e8m0' | 'nested-raw';
  /** NVFP4's global scale applied as stored, or the other way (a multiplier divided by, a divisor multiplied by) */
  global: 'as-stored' | 'inverted';
}

export const CORRECT: Reading = { table: 'e2m1', swap: false, index: 'row-major', scale: 'e8m0', global: 'as-stored' };

export const READINGS: Record<WeightCause, Reading> = {
  'e3m0-table': { ...CORRECT, table: 'e3m0' },
  'nibble-swap': { ...CORRECT, swap: true },
  'scale-missing': { ...CORRECT, scale: 'one' },
  'scale-axis': { ...CORRECT, index: 'transposed' },
  'scale-stride': { ...CORRECT, index: 'stride+1' },
  'e8m0-as-int': { ...CORRECT, scale: 'int' },
  'global-scale-inverted': { ...CORRECT, global: 'inverted' },
  'e4m3-scale-as-e8m0': { ...CORRECT, scale: 'e4m3-as-e8m0' },
  'scale-block-size': { ...CORRECT, index: 'block-32' },
  'code-table': { ...CORRECT, table: 'other-family' },
  'nested-absmax-raw': { ...CORRECT, scale: 'nested-raw' },
};

/** What each reading means, in the words a diagnosis prints. */
export const READING_TEXT: Record<WeightCause, string> = {
  'e3m0-table': 'decoding the FP4 nibbles with an E3M0 table instead of E2M1',
  'nibble-swap': "reading each byte's two codes in the other order (the even element from the high nibble in a low-even format, from the low one in bitsandbytes' high-even)",
  'scale-missing': 'ignoring the block scales (scale = 1)',
  'scale-axis': 'reading the scale grid as if it were stored transposed',
  'scale-stride': 'reading the scale grid with row stride C+1',
  'e8m0-as-int': 'using the E8M0 scale byte e as the number e instead of 2^(e−127)',
  'e4m3-scale-as-e8m0': 'decoding the E4M3 block-scale bytes as E8M0 (2^(b−127))',
  'scale-block-size': 'reading 16-wide scale blocks as if they were 32 wide',
  'global-scale-inverted': "applying NVFP4's global scale the wrong way (dividing by ModelOpt's multiplier, or multiplying by compressed-tensors' divisor)",
  'code-table': "decoding the 4-bit codes with the other family's table (bitsandbytes codes as E2M1, or E2M1 codes as NF4)",
  'nested-absmax-raw': "using bitsandbytes' double-quantized absmax codes (0…255) as the absmax values",
};

/** Does this reading change anything for this format? (A table bug cannot show in an FP8 weight.) The registry says. */
export function applies(cause: WeightCause, lw: LinearWeight): boolean {
  return faultApplies(cause, lw.format, scaleCodeOf(lw));
}

/** The scale grid [R, C] of a quantized weight: mxfp4 one per 32 inputs of a row, fp8 one per block. */
export function scaleGrid(lw: LinearWeight): [number, number] {
  // bitsandbytes: one absmax per `blocksize` elements of the flattened tensor, a single row of blocks
  if (lw.format === 'bnb4') return [1, Math.ceil((lw.out * lw.in) / lw.bnb!.blocksize)];
  return [Math.ceil(lw.out / lw.block[0]), Math.ceil(lw.in / lw.block[1])];
}

export function scaleIndex(R: number, C: number, r: number, c: number, how: Reading['index']): number {
  if (how === 'transposed') return c * R + r;
  if (how === 'stride+1') return (r * (C + 1) + c) % (R * C);
  if (how === 'block-32') return r * Math.floor(C / 2) + Math.floor(c / 2);
  return r * C + c;
}

function e3m0(nibble: number): number {
  const c = nibble & 7;
  const v = c === 0 ? 0 : 2 ** (c - 1);
  return nibble & 8 ? -v : v;
}

/** Scale values of the grid under a reading, as float64 (each exact in float32). */
function scaleValues(lw: LinearWeight, how: Reading): Float64Array {
  const s = lw.scale!;
  const [R, C] = scaleGrid(lw);
  const n = R * C;
  const out = new Float64Array(n);
  if (how.scale === 'one') return out.fill(1);
  if (lw.format === 'bnb4' && s.dtype === 'U8') {
    // double quant: each absmax a product then a sum, each rounded to float32; or the raw code (the bug)
    const nest = lw.bnb!.nested!;
    for (let b = 0; b < n; b++) {
      out[b] = how.scale === 'nested-raw' ? s.bytes[b] : Math.fround(Math.fround(nest.quantMap[s.bytes[b]] * nest.absmax[Math.floor(b / nest.blocksize)]) + nest.offset);
    }
    return out;
  }
  if (s.dtype === 'F32') {
    const dv = new DataView(s.bytes.buffer, s.bytes.byteOffset, s.bytes.byteLength);
    for (let k = 0; k < n; k++) out[k] = dv.getFloat32(4 * k, true);
    return out;
  }
  if (lw.format === 'nvfp4') {
    // E4M3 block scale times (ModelOpt) or over (compressed-tensors) the global scale, rounded once to float32
    const g = lw.global!;
    const mul = (g.op === 'mul') !== (how.global === 'inverted');
    for (let k = 0; k < n; k++) {
      const e = how.scale === 'int' ? s.bytes[k] : how.scale === 'e4m3-as-e8m0' ? E8M0_TABLE[s.bytes[k]] : E4M3_TABLE[s.bytes[k]];
      out[k] = Math.fround(mul ? e * g.value : e / g.value);
    }
    return out;
  }
  for (let k = 0; k < n; k++) out[k] = how.scale === 'int' ? s.bytes[k] : E8M0_TABLE[s.bytes[k]];
  return out;
}

/**
 * Decode a quantized weight [out, in] under a reading and call `visit(flatIndex, f16Bits)` for each element
 * in row-major order; stops early when `visit` returns false. No [out, in] array is allocated.
 */
export function forEachF16(lw: LinearWeight, rd: Reading, visit: (k: number, h: number) => boolean | void): void {
  const { out, in: inn } = lw;
  const [R, C] = scaleGrid(lw);
  const sv = scaleValues(lw, rd);
  const [bo, bi] = lw.block;
  if (lw.format === 'bnb4') {
    // flat codes, high-even; the element is quant_map[code] (or E2M1[code]) × absmax rounded to float32, then FP16
    const packed = lw.weight.bytes;
    const table = rd.table === 'other-family' ? E2M1_VALUES : lw.bnb!.quantMap;
    const bs = lw.bnb!.blocksize;
    for (let k = 0; k < out * inn; k++) {
      const byte = packed[k >> 1];
      const code = (k % 2 === 0) !== rd.swap ? byte >> 4 : byte & 0x0f;
      if (visit(k, f32ToF16Bits(Math.fround(table[code] * sv[Math.floor(k / bs)]))) === false) return;
    }
    return;
  }
  if (lw.format === 'mxfp4' || lw.format === 'nvfp4') {
    // an MX block is 32 elements (16 bytes) of a row, an NVFP4 block 16 (8 bytes); both low-even
    const packed = lw.weight.bytes;
    const table = rd.table === 'e2m1' ? E2M1_VALUES : rd.table === 'other-family' ? NF4_VALUES : Array.from({ length: 16 }, (_, c) => e3m0(c));
    const half = bi / 2;
    for (let o = 0; o < out; o++) {
      for (let c = 0; c < C; c++) {
        const s = sv[scaleIndex(R, C, o, c, rd.index)];
        for (let j = 0; j < half; j++) {
          const byte = packed[o * (inn / 2) + c * half + j];
          const lo = byte & 0x0f;
          const hi = byte >> 4;
          const k = o * inn + c * bi + 2 * j;
          if (visit(k, f32ToF16Bits(Math.fround(table[rd.swap ? hi : lo] * s))) === false) return;
          if (visit(k + 1, f32ToF16Bits(Math.fround(table[rd.swap ? lo : hi] * s))) === false) return;
        }
      }
    }
  } else if (lw.format === 'fp8-block') {
    const codes = lw.weight.bytes;
    for (let o = 0; o < out; o++) {
      const r = Math.floor(o / bo);
      for (let i = 0; i < inn; i++) {
        const s = sv[scaleIndex(R, C, r, Math.floor(i / bi), rd.index)];
        if (visit(o * inn + i, f32ToF16Bits(E4M3_TABLE[codes[o * inn + i]] * s)) === false) return;
      }
    }
  } else {
    throw new Error(`forEachF16: ${lw.name} is a plain weight; readings apply to FP4/FP8 only`);
  }
}

/** FP16 bits equal as values: ±0 are one value, and a NaN equals a NaN (both mean "not a number here"). */
export function sameF16(a: number, b: number): boolean {
  if (a === b) return true;
  if (((a | b) & 0x7fff) === 0) return true;
  return (a & 0x7c00) === 0x7c00 && (a & 0x3ff) !== 0 && (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0;
}

/** Does the reading reproduce `device` (FP16 bits, [out·in]) exactly? */
export function reproduces(lw: LinearWeight, rd: Reading, device: Uint16Array): boolean {
  let ok = true;
  forEachF16(lw, rd, (k, h) => (ok = sameF16(h, device[k])));
  return ok;
}
