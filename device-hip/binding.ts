/**
 * The typed native surface of the `emulated` device backend (addon `ld_device`, C++ in device-hip/src,
 * numerics in device-hip/include/ld_numerics.h). Arguments are validated here, before any native call, so
 * a bad call ends in a TypeError/RangeError naming the shapes; the C++ checks again and throws the same
 * kinds, never aborts. All FP16 data is f16 bits in a Uint16Array; matrices are row-major, weights [out, in].
 */
import { loadAddon } from '../harness/io/addon.js';

export { loadAddon } from '../harness/io/addon.js';

/** Injected device-path faults (DESIGN §9) → the `ld_fault` enum of ld_numerics.h. */
export const FAULT_CODES = {
  'e3m0-table': 1,
  'nibble-swap': 2,
  'scale-missing': 3,
  'scale-axis': 4,
  'scale-stride': 5,
  'e8m0-as-int': 6,
  'global-scale-inverted': 7,
  'e4m3-scale-as-e8m0': 8,
  'scale-block-size': 9,
  'code-table': 10,
  'nested-absmax-raw': 11,
} as const;
export type NativeFault = keyof typeof FAULT_CODES;

/** `kind` of dequantToF16. */
export const DEQUANT_KINDS = { mxfp4: 0, 'fp8-block': 1, bf16: 2, f16: 3, f32: 4 } as const;

export interface DeviceInfo {
  /** which backend computes the ops; under 'hip' the fields below describe the host side (f16/bf16/f32 conversions) */
  backend: 'emulated' | 'hip';
  /** avx512 differs from avx2 only in the GEMM tile; every level gives the same bits */
  simd: 'avx512' | 'avx2' | 'scalar';
  openmpThreads: number;
  compiler: string;
}

export interface DeviceNative {
  /**
   * A stored weight [out, in] → f16 bits [out·in]. kind 0 mxfp4 (weight packed [out, in/2], scale E8M0
   * [out, in/32], block [1, 32]); 1 fp8-block (weight E4M3 [out, in], scale [⌈out/blockOut⌉, ⌈in/blockIn⌉]
   * as E8M0 bytes or, with scaleIsF32, little-endian f32 bytes); 2/3/4 bf16/f16/f32 bytes (scale null).
   * fault: 0 or a FAULT_CODES value; a fault that does not apply to the format is a no-op.
   */
  dequantToF16(kind: number, weight: Uint8Array, scale: Uint8Array | null, scaleIsF32: boolean, out: number, inDim: number, blockOut: number, blockIn: number, fault: number): Uint16Array;
  /**
   * An NVFP4 weight [out, in] → f16 bits: packed [out, in/2] low-even, E4M3 scales [out, in/16], and the
   * tensor's f32 global scale, a multiplier or (globalIsDivisor) a divisor. fault as for dequantToF16.
   */
  dequantNvfp4ToF16(weight: Uint8Array, scale: Uint8Array, out: number, inDim: number, globalScale: number, globalIsDivisor: boolean, fault: number): Uint16Array;
  /**
   * A bitsandbytes 4-bit weight [out, in] → f16 bits [out·in]: codes over the flattened tensor, two a byte
   * high-even, blocks of `blocksize`; absmax as F32 bytes or (absmaxIsCodes, double quant) U8 codes decoded
   * by nestedQuantMap [256] · nestedAbsmax[⌊b/nestedBlocksize⌋] + nestedOffset (both empty without).
   */
  dequantBnb4ToF16(weight: Uint8Array, absmax: Uint8Array, absmaxIsCodes: boolean, quantMap: Float32Array, nestedAbsmax: Float32Array, nestedQuantMap: Float32Array,
    nestedOffset: number, nestedBlocksize: number, out: number, inDim: number, blocksize: number, fault: number): Uint16Array;
  /** y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ), FP32 accumulation in the ld lane order. */
  gemmF16(x: Uint16Array, w: Uint16Array, m: number, k: number, n: number, alpha: number): Uint16Array;
  /** The same product with FP32 output (logits, routers). */
  gemmF16F32(x: Uint16Array, w: Uint16Array, m: number, k: number, n: number): Float32Array;
  rmsnormF16(x: Uint16Array, w: Uint16Array, rows: number, dim: number, eps: number): Uint16Array;
  /** Rotates dims [rotOffset, rotOffset+rotDim) of each head; cos/sin [tokens, rotDim/2]. Returns a new array. */
  ropeF16(x: Uint16Array, cos: Float32Array, sin: Float32Array, tokens: number, heads: number, headDim: number, rotOffset: number, rotDim: number, interleaved: boolean): Uint16Array;
  /** Causal GQA attention; window 0 = unlimited, else key s visible iff t−window < s ≤ t; sinks [Hq] logits or null. */
  attentionF16(q: Uint16Array, k: Uint16Array, v: Uint16Array, T: number, Hq: number, Hkv: number, D: number, Dv: number, scale: number, window: number, sinks: Float32Array | null): Uint16Array;
  /** f16(silu(g)·u), with g ≤ limit and |u| ≤ limit when limit > 0. */
  swigluF16(gate: Uint16Array, up: Uint16Array, limit: number): Uint16Array;
  addF16(a: Uint16Array, b: Uint16Array): Uint16Array;
  mulScalarF16(a: Uint16Array, s: number): Uint16Array;
  f32ToF16(x: Float32Array): Uint16Array;
  f16ToF32(x: Uint16Array): Float32Array;
  bf16ToF16(x: Uint16Array): Uint16Array;
  info(): DeviceInfo;
  /** Test hook: force a kernel level ('avx2', 'scalar': same bits as the best), 'auto' restores the best. */
  setSimd(mode: 'auto' | 'avx2' | 'scalar'): DeviceInfo['simd'];
}

type TypedCtor = Uint8ArrayConstructor | Uint16ArrayConstructor | Float32ArrayConstructor;

function int(fn: string, name: string, v: unknown, min: number): number {
  if (typeof v !== 'number') throw new TypeError(`${fn}: ${name} must be a number, got ${typeof v}`);
  if (!Number.isInteger(v) || v < min || v > 0x7fffffff) throw new RangeError(`${fn}: ${name} must be an integer >= ${min}, got ${v}`);
  return v;
}

function num(fn: string, name: string, v: unknown): number {
  if (typeof v !== 'number') throw new TypeError(`${fn}: ${name} must be a number, got ${typeof v}`);
  return v;
}

function arr(fn: string, name: string, v: unknown, ctor: TypedCtor, want?: number, shape?: string): void {
  if (!(v instanceof ctor)) throw new TypeError(`${fn}: ${name} must be a ${ctor.name}`);
  if (want !== undefined && v.length !== want) throw new RangeError(`${fn}: ${name} has ${v.length} elements, expected ${shape} = ${want}`);
}

const FAULT_MAX = Math.max(...Object.values(FAULT_CODES));

/** Wrap the raw addon with the checks above. */
function validated(raw: DeviceNative): DeviceNative {
  return {
    dequantToF16(kind, weight, scale, scaleIsF32, out, inDim, blockOut, blockIn, fault) {
      const fn = 'dequantToF16';
      int(fn, 'kind', kind, 0);
      if (kind > 4) throw new RangeError(`${fn}: kind must be 0..4 (mxfp4, fp8-block, bf16, f16, f32), got ${kind}`);
      int(fn, 'out', out, 1);
      int(fn, 'in', inDim, 1);
      int(fn, 'blockOut', blockOut, 1);
      int(fn, 'blockIn', blockIn, 1);
      int(fn, 'fault', fault, 0);
      if (fault > FAULT_MAX) throw new RangeError(`${fn}: fault must be 0..${FAULT_MAX}, got ${fault}`);
      if (typeof scaleIsF32 !== 'boolean') throw new TypeError(`${fn}: scaleIsF32 must be a boolean`);
      const shape = `[${out}×${inDim}]`;
      const n = out * inDim;
      if (kind === 0) {
        if (inDim % 32 !== 0) throw new RangeError(`${fn}: mxfp4 weight ${shape}: in must be a multiple of 32`);
        if (blockOut !== 1 || blockIn !== 32) throw new RangeError(`${fn}: mxfp4 block must be [1, 32], got [${blockOut}, ${blockIn}]`);
        if (scale === null || scaleIsF32) throw new TypeError(`${fn}: mxfp4 weight ${shape} needs E8M0 scale bytes (scaleIsF32 false)`);
        arr(fn, 'weight', weight, Uint8Array, n / 2, `packed [${out}×${inDim / 2}]`);
        arr(fn, 'scale', scale, Uint8Array, n / 32, `E8M0 [${out}×${inDim / 32}]`);
      } else if (kind === 1) {
        if (scale === null) throw new TypeError(`${fn}: fp8-block weight ${shape} needs a scale`);
        const R = Math.ceil(out / blockOut), C = Math.ceil(inDim / blockIn);
        arr(fn, 'weight', weight, Uint8Array, n, `E4M3 ${shape}`);
        arr(fn, 'scale', scale, Uint8Array, R * C * (scaleIsF32 ? 4 : 1), `${scaleIsF32 ? '4 bytes × F32 ' : 'E8M0 '}[${R}×${C}]`);
      } else {
        if (scale !== null) throw new TypeError(`${fn}: plain weight ${shape} takes no scale (pass null)`);
        const esz = kind === 4 ? 4 : 2;
        arr(fn, 'weight', weight, Uint8Array, n * esz, `${esz} bytes × ${shape}`);
      }
      return raw.dequantToF16(kind, weight, scale, scaleIsF32, out, inDim, blockOut, blockIn, fault);
    },
    dequantNvfp4ToF16(weight, scale, out, inDim, globalScale, globalIsDivisor, fault) {
      const fn = 'dequantNvfp4ToF16';
      int(fn, 'out', out, 1);
      int(fn, 'in', inDim, 1);
      int(fn, 'fault', fault, 0);
      if (fault > FAULT_MAX) throw new RangeError(`${fn}: fault must be 0..${FAULT_MAX}, got ${fault}`);
      if (inDim % 16 !== 0) throw new RangeError(`${fn}: nvfp4 weight [${out}×${inDim}]: in must be a multiple of 16`);
      num(fn, 'globalScale', globalScale);
      if (!(globalScale > 0) || !Number.isFinite(Math.fround(globalScale))) throw new RangeError(`${fn}: globalScale must be a finite positive f32, got ${globalScale}`);
      if (typeof globalIsDivisor !== 'boolean') throw new TypeError(`${fn}: globalIsDivisor must be a boolean`);
      arr(fn, 'weight', weight, Uint8Array, (out * inDim) / 2, `packed [${out}×${inDim / 2}]`);
      arr(fn, 'scale', scale, Uint8Array, (out * inDim) / 16, `E4M3 [${out}×${inDim / 16}]`);
      return raw.dequantNvfp4ToF16(weight, scale, out, inDim, globalScale, globalIsDivisor, fault);
    },
    dequantBnb4ToF16(weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, out, inDim, blocksize, fault) {
      const fn = 'dequantBnb4ToF16';
      for (const [name, v, lo] of [['out', out, 1], ['in', inDim, 1], ['blocksize', blocksize, 1], ['nestedBlocksize', nestedBlocksize, 1], ['fault', fault, 0]] as const) int(fn, name, v, lo);
      if (fault > FAULT_MAX) throw new RangeError(`${fn}: fault must be 0..${FAULT_MAX}, got ${fault}`);
      if (typeof absmaxIsCodes !== 'boolean') throw new TypeError(`${fn}: absmaxIsCodes must be a boolean`);
      num(fn, 'nestedOffset', nestedOffset);
      const n = out * inDim, nb = Math.ceil(n / blocksize);
      arr(fn, 'weight', weight, Uint8Array, Math.ceil(n / 2), `packed [(out·in+1)/2]`);
      arr(fn, 'absmax', absmax, Uint8Array, absmaxIsCodes ? nb : 4 * nb, absmaxIsCodes ? 'U8 codes [⌈out·in/blocksize⌉]' : 'F32 bytes 4·[⌈out·in/blocksize⌉]');
      arr(fn, 'quantMap', quantMap, Float32Array, 16, '[16]');
      arr(fn, 'nestedAbsmax', nestedAbsmax, Float32Array, absmaxIsCodes ? Math.ceil(nb / nestedBlocksize) : 0, '[⌈nblocks/nestedBlocksize⌉]');
      arr(fn, 'nestedQuantMap', nestedQuantMap, Float32Array, absmaxIsCodes ? 256 : 0, absmaxIsCodes ? '[256]' : '[] (no double quant)');
      return raw.dequantBnb4ToF16(weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, out, inDim, blocksize, fault);
    },
    gemmF16(x, w, m, k, n, alpha) {
      gemmArgs('gemmF16', x, w, m, k, n);
      return raw.gemmF16(x, w, m, k, n, num('gemmF16', 'alpha', alpha));
    },
    gemmF16F32(x, w, m, k, n) {
      gemmArgs('gemmF16F32', x, w, m, k, n);
      return raw.gemmF16F32(x, w, m, k, n);
    },
    rmsnormF16(x, w, rows, dim, eps) {
      const fn = 'rmsnormF16';
      int(fn, 'rows', rows, 1);
      int(fn, 'dim', dim, 1);
      arr(fn, 'x', x, Uint16Array, rows * dim, `rows×dim [${rows}×${dim}]`);
      arr(fn, 'w', w, Uint16Array, dim, `dim [${dim}]`);
      return raw.rmsnormF16(x, w, rows, dim, num(fn, 'eps', eps));
    },
    ropeF16(x, cos, sin, tokens, heads, headDim, rotOffset, rotDim, interleaved) {
      const fn = 'ropeF16';
      int(fn, 'tokens', tokens, 1);
      int(fn, 'heads', heads, 1);
      int(fn, 'headDim', headDim, 1);
      int(fn, 'rotOffset', rotOffset, 0);
      int(fn, 'rotDim', rotDim, 2);
      if (rotDim % 2 !== 0 || rotOffset + rotDim > headDim) {
        throw new RangeError(`${fn}: rotOffset ${rotOffset} + rotDim ${rotDim} must fit in headDim ${headDim} with rotDim even`);
      }
      if (typeof interleaved !== 'boolean') throw new TypeError(`${fn}: interleaved must be a boolean`);
      const half = rotDim / 2;
      arr(fn, 'x', x, Uint16Array, tokens * heads * headDim, `tokens×heads×headDim [${tokens}×${heads}×${headDim}]`);
      arr(fn, 'cos', cos, Float32Array, tokens * half, `tokens×rotDim/2 [${tokens}×${half}]`);
      arr(fn, 'sin', sin, Float32Array, tokens * half, `tokens×rotDim/2 [${tokens}×${half}]`);
      return raw.ropeF16(x, cos, sin, tokens, heads, headDim, rotOffset, rotDim, interleaved);
    },
    attentionF16(q, k, v, T, Hq, Hkv, D, Dv, scale, window, sinks) {
      const fn = 'attentionF16';
      int(fn, 'T', T, 1);
      int(fn, 'Hq', Hq, 1);
      int(fn, 'Hkv', Hkv, 1);
      int(fn, 'D', D, 1);
      int(fn, 'Dv', Dv, 1);
      int(fn, 'window', window, 0);
      if (Hq % Hkv !== 0) throw new RangeError(`${fn}: Hq ${Hq} is not a multiple of Hkv ${Hkv}`);
      arr(fn, 'q', q, Uint16Array, T * Hq * D, `T×Hq×D [${T}×${Hq}×${D}]`);
      arr(fn, 'k', k, Uint16Array, T * Hkv * D, `T×Hkv×D [${T}×${Hkv}×${D}]`);
      arr(fn, 'v', v, Uint16Array, T * Hkv * Dv, `T×Hkv×Dv [${T}×${Hkv}×${Dv}]`);
      if (sinks !== null) arr(fn, 'sinks', sinks, Float32Array, Hq, `Hq [${Hq}]`);
      return raw.attentionF16(q, k, v, T, Hq, Hkv, D, Dv, num(fn, 'scale', scale), window, sinks);
    },
    swigluF16(gate, up, limit) {
      arr('swigluF16', 'gate', gate, Uint16Array);
      arr('swigluF16', 'up', up, Uint16Array, gate.length, "gate's length");
      return raw.swigluF16(gate, up, num('swigluF16', 'limit', limit));
    },
    addF16(a, b) {
      arr('addF16', 'a', a, Uint16Array);
      arr('addF16', 'b', b, Uint16Array, a.length, "a's length");
      return raw.addF16(a, b);
    },
    mulScalarF16(a, s) {
      arr('mulScalarF16', 'a', a, Uint16Array);
      return raw.mulScalarF16(a, num('mulScalarF16', 's', s));
    },
    f32ToF16(x) {
      arr('f32ToF16', 'x', x, Float32Array);
      return raw.f32ToF16(x);
    },
    f16ToF32(x) {
      arr('f16ToF32', 'x', x, Uint16Array);
      return raw.f16ToF32(x);
    },
    bf16ToF16(x) {
      arr('bf16ToF16', 'x', x, Uint16Array);
      return raw.bf16ToF16(x);
    },
    info: () => raw.info(),
    setSimd(mode) {
      if (mode !== 'auto' && mode !== 'avx2' && mode !== 'scalar') throw new RangeError(`setSimd: mode must be 'auto', 'avx2' or 'scalar', got ${String(mode)}`);
      return raw.setSimd(mode);
    },
  };
}

function gemmArgs(fn: string, x: unknown, w: unknown, m: number, k: number, n: number): void {
  int(fn, 'm', m, 1);
  int(fn, 'k', k, 1);
  int(fn, 'n', n, 1);
  arr(fn, 'x', x, Uint16Array, m * k, `m×k [${m}×${k}]`);
  arr(fn, 'w', w, Uint16Array, n * k, `n×k [${n}×${k}]`);
}

let cached: DeviceNative | undefined;

/** The emulated device backend (loaded once). Throws if the addon has not been built. */
export function loadDeviceNative(): DeviceNative {
  cached ??= validated(loadAddon('ld_device') as DeviceNative);
  return cached;
}

// ---------------------------------------------------------------------------------------------------
// KV-cache attention for incremental decoding (device-hip/src/decode.cc; used by device-hip/llama_decode.ts).
// Kept as its own section with its own loader so the surface above stays exactly the runner's.
// ---------------------------------------------------------------------------------------------------

export interface DecodeNative {
  /**
   * Attention of B query groups of Tq new queries each over a KV cache of Bc sequences × cap slots
   * (slot s mod cap holds position s: a ring when window + Tq − 1 ≤ cap < the sequence). Group b reads cache sequence slot[b]; its query t sits at position
   * start[b] + t and sees slots max(0, p − window + 1) … p (window 0: 0 … p). q [B, Tq, Hq, D],
   * k [Bc, cap, Hkv, D], v [Bc, cap, Hkv, Dv] → [B, Tq, Hq, Dv], same numerics as attentionF16.
   */
  attentionDecodeF16(
    q: Uint16Array, k: Uint16Array, v: Uint16Array, B: number, Tq: number, Bc: number, cap: number,
    slot: Int32Array, start: Int32Array, Hq: number, Hkv: number, D: number, Dv: number, scale: number,
    window: number, sinks: Float32Array | null,
  ): Uint16Array;
}

/** DecodeNative's argument checks around any implementation (the emulation's, or the hip backend's). */
export function validatedDecodeNative(raw: DecodeNative): DecodeNative {
  return {
    attentionDecodeF16(q, k, v, B, Tq, Bc, cap, slot, start, Hq, Hkv, D, Dv, scale, window, sinks) {
      const fn = 'attentionDecodeF16';
      for (const [name, x, min] of [['B', B, 1], ['Tq', Tq, 1], ['Bc', Bc, 1], ['cap', cap, 1], ['Hq', Hq, 1], ['Hkv', Hkv, 1], ['D', D, 1], ['Dv', Dv, 1], ['window', window, 0]] as const) {
        int(fn, name, x, min);
      }
      if (Hq % Hkv !== 0) throw new RangeError(`${fn}: Hq ${Hq} is not a multiple of Hkv ${Hkv}`);
      arr(fn, 'q', q, Uint16Array, B * Tq * Hq * D, `B×Tq×Hq×D [${B}×${Tq}×${Hq}×${D}]`);
      arr(fn, 'k', k, Uint16Array, Bc * cap * Hkv * D, `Bc×cap×Hkv×D [${Bc}×${cap}×${Hkv}×${D}]`);
      arr(fn, 'v', v, Uint16Array, Bc * cap * Hkv * Dv, `Bc×cap×Hkv×Dv [${Bc}×${cap}×${Hkv}×${Dv}]`);
      if (!(slot instanceof Int32Array) || slot.length !== B) throw new TypeError(`${fn}: slot must be an Int32Array of B = ${B} elements`);
      if (!(start instanceof Int32Array) || start.length !== B) throw new TypeError(`${fn}: start must be an Int32Array of B = ${B} elements`);
      for (let b = 0; b < B; b++) {
        if (slot[b] < 0 || slot[b] >= Bc) throw new RangeError(`${fn}: slot[${b}] = ${slot[b]} is outside the cache's ${Bc} sequences`);
        if (start[b] < 0 || (start[b] + Tq > cap && !(window > 0 && window + Tq - 1 <= cap))) throw new RangeError(`${fn}: start[${b}] = ${start[b]} + Tq ${Tq} does not fit the cache capacity ${cap} (a ring needs window + Tq − 1 ≤ cap)`);
      }
      if (sinks !== null) arr(fn, 'sinks', sinks, Float32Array, Hq, `Hq [${Hq}]`);
      return raw.attentionDecodeF16(q, k, v, B, Tq, Bc, cap, slot, start, Hq, Hkv, D, Dv, num(fn, 'scale', scale), window, sinks);
    },
  };
}

/** A surface of the emulation addon beside DeviceNative, checked for one of its functions (an older build lacks it). */
function loadSurface<T extends object>(probe: keyof T, what: string, validate: (raw: T) => T): T {
  const raw = loadAddon('ld_device') as Partial<T>;
  if (typeof raw[probe] !== 'function') throw new Error(`native addon lacks ${what}: rebuild it with npm run build:native`);
  return validate(raw as T);
}

let cachedDecode: DecodeNative | undefined;

/** The decode kernels of the emulated backend, argument-checked like the rest of this file. */
export function loadDecodeNative(): DecodeNative {
  cachedDecode ??= loadSurface<DecodeNative>('attentionDecodeF16', 'attentionDecodeF16', validatedDecodeNative);
  return cachedDecode;
}

// ---------------------------------------------------------------------------------------------------
// DeepSeek-V4 kernels (device-hip/src/deepseek_*.cc; element numerics in include/ld_deepseek.h). A surface of
// their own, like DecodeNative: only DeepSeek-V4's device path uses them. Shapes: T tokens, hc streams of
// width D, f16 as bits in Uint16Array, index lists as Int32Array (−1 = empty slot).
// ---------------------------------------------------------------------------------------------------

/** hcPreF16's three outputs: the sublayer input, the post weights and the Sinkhorn-normalized combination. */
export interface HcPreResult {
  /** f16 [T, D]: Σ_j pre_j·X_j */
  u: Uint16Array;
  /** f32 [T, hc]: 2σ(·) */
  post: Float32Array;
  /** f32 [T, hc, hc]: C[t][j][k] (X'_k = post_k·F + Σ_j C_jk·X_j) */
  comb: Float32Array;
}

export interface IndexerTopkResult {
  /** f32 [T, B]; blocks not yet visible to row t (b ≥ ⌊(t0+t+1)/ratio⌋) hold −∞ */
  scores: Float32Array;
  /** [T, topk]: the chosen blocks ascending, then −1 */
  picks: Int32Array;
}

export interface RouterResult {
  /** [T, topk] expert ids, ascending per token */
  ids: Int32Array;
  /** f32 [T, topk]: routeScale·s_i / Σ s, aligned with ids */
  weights: Float32Array;
  /** f32 [T, E]: s = sqrt(softplus(logit)) */
  scores: Float32Array;
}

export interface DeepseekNative {
  /** hc_pre (§4.3): x f16 [T, hc, D]; fn f32 [(2+hc)·hc, hc·D]; base f32 [(2+hc)·hc]; scale f32 [3]. */
  hcPreF16(x: Uint16Array, fn: Float32Array, base: Float32Array, scale: Float32Array, T: number, hc: number, D: number, normEps: number, hcEps: number, iters: number): HcPreResult;
  /** hc_post (§4.3): f16(post_k·f + Σ_j C_jk·X_j) → f16 [T, hc, D]. */
  hcPostF16(f: Uint16Array, x: Uint16Array, post: Float32Array, comb: Float32Array, T: number, hc: number, D: number): Uint16Array;
  /** hc_head (§4.7): fn f32 [hc, hc·D], base f32 [hc], scale f32 [1] → f16 [T, D]. */
  hcHeadF16(x: Uint16Array, fn: Float32Array, base: Float32Array, scale: Float32Array, T: number, hc: number, D: number, normEps: number, hcEps: number): Uint16Array;
  /** The compressor's gated pooling (§4.5 step 3): K, Z f32 [T, c·dc], ape f32 [ratio, c·dc], c = 2 iff overlap → f16 [⌊T/ratio⌋, dc]. */
  compressPoolF16(K: Float32Array, Z: Float32Array, ape: Float32Array, T: number, ratio: number, dc: number, overlap: boolean): Uint16Array;
  /**
   * Indexer scores and top-k (§4.5 step 6): q f16 [T, nh, hd], w f16 [T, nh] (unscaled), e f16 [B, hd]. Row t is
   * the query at absolute position t0 + t and sees blocks b < ⌊(t0+t+1)/ratio⌋; a row's result depends only on
   * its own q, w and position, so rows t0.. of a longer call equal a call with those rows alone and this t0
   * (a decode step scores its one query without rows 0..t0−1).
   */
  indexerTopkF16(q: Uint16Array, w: Uint16Array, e: Uint16Array, T: number, nh: number, hd: number, B: number, ratio: number, t0: number, topk: number, scale: number): IndexerTopkResult;
  /**
   * Attention with a sink over explicit candidates (§4.5 steps 4–5): q f16 [T, H, D]; one K=V head: raw rows
   * kv f16 [T, D] (token t sees s in [max(0, t−window+1), t]; window 0 = all s ≤ t) and compressed rows
   * comp f16 [B, D] listed per token in cand [T, K] (−1 = none); sinks f32 [H] → f16 [T, H, D].
   * Causality of cand is the caller's: the kernel checks only that each entry is −1 or a row of comp.
   */
  sparseAttentionF16(q: Uint16Array, kv: Uint16Array, comp: Uint16Array, T: number, H: number, D: number, B: number, window: number, cand: Int32Array, K: number, sinks: Float32Array, scale: number): Uint16Array;
  /** Router (§4.6 steps 1–3): logits f32 [T, E]; bias f32 [E] for selection only; given [T, topk] ids replace the choice. */
  routerF32(logits: Float32Array, bias: Float32Array | null, T: number, E: number, topk: number, routeScale: number, given: Int32Array | null): RouterResult;
  /** f16(swiglu(g, u, limit)·rowWeights[r]) over [rows, cols]; rowWeights null = 1 (then bit-identical to swigluF16). */
  swigluRowsF16(gate: Uint16Array, up: Uint16Array, rows: number, cols: number, rowWeights: Float32Array | null, limit: number): Uint16Array;
  /** Per token: f16(Σ routed rows y[r] with rowToken[r] = t, in increasing r, then + shared[t]), all in f32. */
  moeCombineF16(y: Uint16Array, rowToken: Int32Array, shared: Uint16Array, T: number, D: number): Uint16Array;
}

function i32(fn: string, name: string, v: unknown, want: number, shape: string, lo: number, hi: number): void {
  if (!(v instanceof Int32Array)) throw new TypeError(`${fn}: ${name} must be an Int32Array`);
  if (v.length !== want) throw new RangeError(`${fn}: ${name} has ${v.length} elements, expected ${shape} = ${want}`);
  for (let i = 0; i < v.length; i++) {
    if (v[i] < lo || v[i] >= hi) throw new RangeError(`${fn}: ${name}[${i}] = ${v[i]} is outside [${lo}, ${hi})`);
  }
}

function hcArgs(fn: string, x: unknown, fnW: unknown, base: unknown, scale: unknown, T: number, hc: number, D: number, nmix: number, nscale: number): void {
  int(fn, 'T', T, 1);
  int(fn, 'hc', hc, 1);
  int(fn, 'D', D, 1);
  arr(fn, 'x', x, Uint16Array, T * hc * D, `T×hc×D [${T}×${hc}×${D}]`);
  arr(fn, 'fn', fnW, Float32Array, nmix * hc * D, `[${nmix}×${hc * D}]`);
  arr(fn, 'base', base, Float32Array, nmix, `[${nmix}]`);
  arr(fn, 'scale', scale, Float32Array, nscale, `[${nscale}]`);
}

/** DeepseekNative's argument checks around any implementation (the emulation's, or the hip backend's). */
export function validatedDeepseekNative(raw: DeepseekNative): DeepseekNative {
  return {
    hcPreF16(x, fnW, base, scale, T, hc, D, normEps, hcEps, iters) {
      const fn = 'hcPreF16';
      hcArgs(fn, x, fnW, base, scale, T, hc, D, (2 + hc) * hc, 3);
      int(fn, 'iters', iters, 1);
      return raw.hcPreF16(x, fnW, base, scale, T, hc, D, num(fn, 'normEps', normEps), num(fn, 'hcEps', hcEps), iters);
    },
    hcPostF16(f, x, post, comb, T, hc, D) {
      const fn = 'hcPostF16';
      int(fn, 'T', T, 1);
      int(fn, 'hc', hc, 1);
      int(fn, 'D', D, 1);
      arr(fn, 'f', f, Uint16Array, T * D, `T×D [${T}×${D}]`);
      arr(fn, 'x', x, Uint16Array, T * hc * D, `T×hc×D [${T}×${hc}×${D}]`);
      arr(fn, 'post', post, Float32Array, T * hc, `T×hc [${T}×${hc}]`);
      arr(fn, 'comb', comb, Float32Array, T * hc * hc, `T×hc×hc [${T}×${hc}×${hc}]`);
      return raw.hcPostF16(f, x, post, comb, T, hc, D);
    },
    hcHeadF16(x, fnW, base, scale, T, hc, D, normEps, hcEps) {
      const fn = 'hcHeadF16';
      hcArgs(fn, x, fnW, base, scale, T, hc, D, hc, 1);
      return raw.hcHeadF16(x, fnW, base, scale, T, hc, D, num(fn, 'normEps', normEps), num(fn, 'hcEps', hcEps));
    },
    compressPoolF16(K, Z, ape, T, ratio, dc, overlap) {
      const fn = 'compressPoolF16';
      int(fn, 'T', T, 1);
      int(fn, 'ratio', ratio, 1);
      int(fn, 'dc', dc, 1);
      if (typeof overlap !== 'boolean') throw new TypeError(`${fn}: overlap must be a boolean`);
      const w = (overlap ? 2 : 1) * dc;
      arr(fn, 'K', K, Float32Array, T * w, `T×c·dc [${T}×${w}]`);
      arr(fn, 'Z', Z, Float32Array, T * w, `T×c·dc [${T}×${w}]`);
      arr(fn, 'ape', ape, Float32Array, ratio * w, `ratio×c·dc [${ratio}×${w}]`);
      return raw.compressPoolF16(K, Z, ape, T, ratio, dc, overlap);
    },
    indexerTopkF16(q, w, e, T, nh, hd, B, ratio, t0, topk, scale) {
      const fn = 'indexerTopkF16';
      int(fn, 'T', T, 1);
      int(fn, 'nh', nh, 1);
      int(fn, 'hd', hd, 1);
      int(fn, 'B', B, 0);
      int(fn, 'ratio', ratio, 1);
      int(fn, 't0', t0, 0);
      int(fn, 'topk', topk, 1);
      arr(fn, 'q', q, Uint16Array, T * nh * hd, `T×nh×hd [${T}×${nh}×${hd}]`);
      arr(fn, 'w', w, Uint16Array, T * nh, `T×nh [${T}×${nh}]`);
      arr(fn, 'e', e, Uint16Array, B * hd, `B×hd [${B}×${hd}]`);
      return raw.indexerTopkF16(q, w, e, T, nh, hd, B, ratio, t0, topk, num(fn, 'scale', scale));
    },
    sparseAttentionF16(q, kv, comp, T, H, D, B, window, cand, K, sinks, scale) {
      const fn = 'sparseAttentionF16';
      int(fn, 'T', T, 1);
      int(fn, 'H', H, 1);
      int(fn, 'D', D, 1);
      int(fn, 'B', B, 0);
      int(fn, 'window', window, 0);
      int(fn, 'K', K, 0);
      arr(fn, 'q', q, Uint16Array, T * H * D, `T×H×D [${T}×${H}×${D}]`);
      arr(fn, 'kv', kv, Uint16Array, T * D, `T×D [${T}×${D}]`);
      arr(fn, 'comp', comp, Uint16Array, B * D, `B×D [${B}×${D}]`);
      i32(fn, 'cand', cand, T * K, `T×K [${T}×${K}]`, -1, B);
      arr(fn, 'sinks', sinks, Float32Array, H, `H [${H}]`);
      return raw.sparseAttentionF16(q, kv, comp, T, H, D, B, window, cand, K, sinks, num(fn, 'scale', scale));
    },
    routerF32(logits, bias, T, E, topk, routeScale, given) {
      const fn = 'routerF32';
      routerArgs(fn, logits, bias, T, E, topk, given);
      return raw.routerF32(logits, bias, T, E, topk, num(fn, 'routeScale', routeScale), given);
    },
    swigluRowsF16(gate, up, rows, cols, rowWeights, limit) {
      const fn = 'swigluRowsF16';
      int(fn, 'rows', rows, 1);
      int(fn, 'cols', cols, 1);
      arr(fn, 'gate', gate, Uint16Array, rows * cols, `rows×cols [${rows}×${cols}]`);
      arr(fn, 'up', up, Uint16Array, rows * cols, `rows×cols [${rows}×${cols}]`);
      if (rowWeights !== null) arr(fn, 'rowWeights', rowWeights, Float32Array, rows, `rows [${rows}]`);
      return raw.swigluRowsF16(gate, up, rows, cols, rowWeights, num(fn, 'limit', limit));
    },
    moeCombineF16(y, rowToken, shared, T, D) {
      const fn = 'moeCombineF16';
      int(fn, 'T', T, 1);
      int(fn, 'D', D, 1);
      if (!(rowToken instanceof Int32Array)) throw new TypeError(`${fn}: rowToken must be an Int32Array`);
      i32(fn, 'rowToken', rowToken, rowToken.length, 'R', 0, T);
      arr(fn, 'y', y, Uint16Array, rowToken.length * D, `R×D [${rowToken.length}×${D}]`);
      arr(fn, 'shared', shared, Uint16Array, T * D, `T×D [${T}×${D}]`);
      return raw.moeCombineF16(y, rowToken, shared, T, D);
    },
  };
}

let cachedDeepseek: DeepseekNative | undefined;

/** The DeepSeek-V4 kernels of the emulated backend, argument-checked like the rest of this file. */
export function loadDeepseekNative(): DeepseekNative {
  cachedDeepseek ??= loadSurface<DeepseekNative>('hcPreF16', 'the DeepSeek-V4 kernels (hcPreF16, …)', validatedDeepseekNative);
  return cachedDeepseek;
}

// ---------------------------------------------------------------------------------------------------
// The `hip` backend (device-hip/hip/hip_native.ts) offers these same surfaces (DeviceNative, DecodeNative,
// DeepseekNative) with their ops on an AMD GPU, and needs the same argument checks: the validators, exported.
// ---------------------------------------------------------------------------------------------------

/** DeviceNative's argument checks (TypeError/RangeError naming the shapes) around any implementation. */
export function validatedDeviceNative(raw: DeviceNative): DeviceNative {
  return validated(raw);
}

// ---------------------------------------------------------------------------------------------------
// gpt-oss kernels (device-hip/src/gpt_oss.cc; element numerics in include/ld_gpt_oss.h): the router with a
// softmax over the top-k logits only, and the clamped, α-scaled, +1-shifted SwiGLU on interleaved gate/up rows.
// The hip backend offers the same surface (kernels/gpt_oss.hip).
// ---------------------------------------------------------------------------------------------------

export interface OssRouterResult {
  /** Int32 [T, topk]: chosen experts, ascending per token */
  ids: Int32Array;
  /** f32 [T, topk]: softmax over the chosen biased logits, in the order of ids */
  weights: Float32Array;
}

export interface GptOssNative {
  /** logits f32 [T, E] (gemmF16F32), bias f32 [E] or null; given Int32 [T, topk] ids replace the choice. */
  ossRouterF32(logits: Float32Array, bias: Float32Array | null, T: number, E: number, topk: number, given: Int32Array | null): OssRouterResult;
  /** h f16 [rows, 2I] (gate = even, up = odd elements) → f16 [rows, I]: min(g, L)·σ(α·min(g, L))·(clamp(u, ±L) + 1). */
  ossSwigluF16(h: Uint16Array, rows: number, I: number, limit: number, alpha: number): Uint16Array;
}

/** GptOssNative's argument checks around any implementation. */
/** The arguments every top-k router op takes (DeepSeek-V4's and gpt-oss's): [T×E] f32 logits, an optional [E] bias, optional forced picks. */
function routerArgs(fn: string, logits: Float32Array, bias: Float32Array | null, T: number, E: number, topk: number, given: Int32Array | null): void {
  int(fn, 'T', T, 1);
  int(fn, 'E', E, 1);
  int(fn, 'topk', topk, 1);
  if (topk > E) throw new RangeError(`${fn}: topk ${topk} exceeds E ${E}`);
  arr(fn, 'logits', logits, Float32Array, T * E, `T×E [${T}×${E}]`);
  if (bias !== null) arr(fn, 'bias', bias, Float32Array, E, `E [${E}]`);
  if (given !== null) i32(fn, 'given', given, T * topk, `T×topk [${T}×${topk}]`, 0, E);
}

export function validatedGptOssNative(raw: GptOssNative): GptOssNative {
  return {
    ossRouterF32(logits, bias, T, E, topk, given) {
      const fn = 'ossRouterF32';
      routerArgs(fn, logits, bias, T, E, topk, given);
      return raw.ossRouterF32(logits, bias, T, E, topk, given);
    },
    ossSwigluF16(h, rows, I, limit, alpha) {
      const fn = 'ossSwigluF16';
      int(fn, 'rows', rows, 1);
      int(fn, 'I', I, 1);
      arr(fn, 'h', h, Uint16Array, rows * 2 * I, `rows×2I [${rows}×${2 * I}]`);
      return raw.ossSwigluF16(h, rows, I, num(fn, 'limit', limit), num(fn, 'alpha', alpha));
    },
  };
}

let cachedGptOss: GptOssNative | undefined;

/** The gpt-oss kernels of the emulated backend, argument-checked like the rest of this file. */
export function loadGptOssNative(): GptOssNative {
  cachedGptOss ??= loadSurface<GptOssNative>('ossRouterF32', 'the gpt-oss kernels (ossRouterF32, ossSwigluF16)', validatedGptOssNative);
  return cachedGptOss;
}
