/**
 * FP16 weights for the device path: dequantized once per (layer weight, fault) and shared by the accumulated
 * and isolated runs of that layer. Keyed weakly by the bound weight, so a layer's FP16 copy dies with it.
 * MXFP4, NVFP4 and FP8-block weights, and bitsandbytes 4-bit ones whose rows hold whole blocks, are multiplied from
 * their stored bytes instead (product: whole, and the slices fused() lists), and so are routed experts (productOnce).
 * What is still copied: BF16 and F32 weights, bitsandbytes blocks that straddle rows or a slice of their rows, a
 * faulted slice, the fp16-accumulate fault's products and the FP32-output ones (gemmF16F32: routers, compressors).
 */
import { decodeToF32 } from '../harness/formats/dtypes.js';
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';
import { type DeviceNative, type DeviceRowSource, FAULT_CODES } from './binding.js';
import type { FaultId } from '../harness/faults/plan.js';
import { detachBuffer } from '../harness/io/map.js';
import { sharedReadPool, tieToRead, withReadPool } from '../harness/io/read_pool.js';

const KIND = { mxfp4: 0, 'fp8-block': 1 } as const;
const PLAIN_KIND: Record<string, number> = { BF16: 2, F16: 3, F32: 4 };
const EMPTY_F32 = new Float32Array(0);

/** A fault's code for the native ops (0: none, or a fault the dequantization does not take). */
const faultCode = (fault: FaultId | null): number => (fault !== null && fault in FAULT_CODES ? FAULT_CODES[fault as keyof typeof FAULT_CODES] : 0);

/** dequantBnb4ToF16's arguments for a bitsandbytes weight (its row source takes the same). */
function bnb4Args(lw: LinearWeight, code: number): Parameters<DeviceNative['dequantBnb4ToF16']> {
  const q = lw.bnb!;
  const nest = q.nested;
  return [lw.weight.bytes, lw.scale!.bytes, nest !== null, q.quantMap, nest?.absmax ?? EMPTY_F32, nest?.quantMap ?? EMPTY_F32, nest?.offset ?? 0, nest?.blocksize ?? 1, lw.out, lw.in, q.blocksize, code];
}

/** Whether each row of a bitsandbytes weight holds whole blocks of an even size (so a block starts on a byte). */
function bnb4WholeRows(lw: LinearWeight): boolean {
  const bs = lw.bnb!.blocksize;
  return bs % 2 === 0 && lw.in % bs === 0;
}

/**
 * Whether rows [r0, r0 + n) of an FP8-block weight are a weight of their own to the fused product: whole block rows
 * (or through the last row), and no injected fault, whose scale indexing may depend on the whole tensor's shape.
 */
function fp8SliceAligned(lw: LinearWeight, r0: number, n: number, code: number): boolean {
  if (r0 === 0 && n === lw.out) return true;
  const bo = lw.block[0];
  return code === 0 && r0 % bo === 0 && (n % bo === 0 || r0 + n === lw.out);
}

export class LinearCache {
  private readonly cache = new WeakMap<LinearWeight, Map<string, Uint16Array>>();
  constructor(private readonly N: DeviceNative) {}

  get(lw: LinearWeight, fault: FaultId | null): Uint16Array {
    const code = faultCode(fault);
    const key = String(code);
    let byFault = this.cache.get(lw);
    if (byFault === undefined) {
      byFault = new Map();
      this.cache.set(lw, byFault);
    }
    let w = byFault.get(key);
    if (w === undefined) {
      w = this.dequant(lw, fault);
      byFault.set(key, w);
      // freed when the layer's read of lw ends (its scope: the runner's layer), not when collected
      tieToRead(lw.weight.bytes, w);
    }
    return w;
  }

  /**
   * The device's FP16 rows of lw as a row source for the weights-first check's fused pass (dequantToF16's formats,
   * NVFP4, and bitsandbytes where each row holds whole blocks of an even size), or null where the device has none
   * (the hip backend) and for bitsandbytes blocks that straddle rows, which the fused pass's [row, column] block
   * grid cannot count.
   */
  rowSource(lw: LinearWeight, fault: FaultId | null): DeviceRowSource | null {
    const code = faultCode(fault);
    if (lw.format === 'nvfp4') {
      if (this.N.nvfp4RowSource === undefined) return null;
      const g = lw.global!;
      return this.N.nvfp4RowSource(lw.weight.bytes, lw.scale!.bytes, lw.out, lw.in, g.value, g.op === 'div', code);
    }
    if (lw.format === 'bnb4') {
      if (this.N.bnb4RowSource === undefined || !bnb4WholeRows(lw)) return null;
      return this.N.bnb4RowSource(...bnb4Args(lw, code));
    }
    if (this.N.dequantRowSource === undefined) return null;
    const kind = lw.format === 'plain' ? PLAIN_KIND[lw.weight.dtype] : KIND[lw.format as keyof typeof KIND];
    return this.N.dequantRowSource(kind, lw.weight.bytes, lw.scale?.bytes ?? null, lw.scale?.dtype === 'F32', lw.out, lw.in, lw.block[0], lw.block[1], code);
  }

  /**
   * x f16 [rows, lw.in] · (rows [r0, r0 + n) of W)ᵀ → f16 [rows, n] (FP32 accumulation, gemmF16's bits; the whole
   * weight by default). A stored 4-bit or FP8-block weight is multiplied from its stored bytes (fused, below) and
   * never copied to FP16; anything else multiplies the FP16 copy, held and shared by the runs of a layer.
   */
  product(x: Uint16Array, rows: number, lw: LinearWeight, fault: FaultId | null, alpha = 1, r0 = 0, n = lw.out): Uint16Array {
    const y = this.fused(x, rows, lw, faultCode(fault), alpha, r0, n);
    if (y !== null) return y;
    const w = this.get(lw, fault);
    return this.N.gemmF16(x, r0 === 0 && n === lw.out ? w : w.subarray(r0 * lw.in, (r0 + n) * lw.in), rows, lw.in, n, alpha);
  }

  /**
   * x f16 [rows, lw.in] · Wᵀ → f16 [rows, lw.out] (FP32 accumulation, gemmF16's bits) for a weight used once (a
   * routed expert): fused where product is, so no 16 MiB f16 copy of an expert is written and dropped
   * (DeepSeek-V4-Flash-Base stores its routed experts as FP8 blocks, gpt-oss as MXFP4); any other through its FP16
   * copy, freed when the product returns (once). At a diff's row counts a copy freed at once is rewritten while the
   * cache still holds it, so there the fused product saves memory, not time: 32 NVFP4 experts [2048×4096] at 16 rows,
   * 39.1–39.8 ms fused against 38.4–38.5 ms through `once` (round 26).
   */
  productOnce(x: Uint16Array, rows: number, lw: LinearWeight, fault: FaultId | null, alpha = 1): Uint16Array {
    return this.fused(x, rows, lw, faultCode(fault), alpha, 0, lw.out) ?? this.once(lw, fault, (w) => this.N.gemmF16(x, w, rows, lw.in, lw.out, alpha));
  }

  /**
   * The product through the weight's fused GEMM, rows decoded inside the product by the row function of its
   * dequantization (the same bits as gemmF16 over the FP16 copy), or null where there is none:
   *   - MXFP4 (gemmMxfp4F16) and NVFP4 (gemmNvfp4F16): whole, or any slice of rows without a fault (a row's blocks
   *     are its own; a fault's scale indexing may read the whole shape);
   *   - FP8 blocks (gemmFp8F16): whole, or a block-aligned slice;
   *   - bitsandbytes 4-bit (gemmBnb4F16): whole, where each row holds whole blocks of an even size (every
   *     bitsandbytes checkpoint's linears; blocks run over the flattened tensor, so a slice's absmax and nested
   *     absmax would not start at a block of their own).
   * A decode step's product (≤ 4 rows, the GEMV kernels) reads half a byte or a byte a weight instead of the copy's
   * two. At a diff's row counts the fused GEMMs take about the F16 GEMM's time over a held copy: [m×4096]·[4096×4096],
   * FP8 3–6 % more at m = 256 and 1024 and MXFP4 0.88–0.93× (round 25); [16×4096]·[2048×4096] in `npm run bench`,
   * MXFP4, NVFP4 and bitsandbytes 1.07–1.09× (round 26). Each copy cost a dequantization and 2 bytes a weight of
   * fresh memory per layer: routing MXFP4 and FP8 here took a 16-token diff of deepseek-v4-wide (4 layers) from
   * 0.36–0.59 to 0.30–0.47 s of device time a layer and its peak RSS from 1.69 to 1.42 GiB (alternating runs), and a
   * layer's two runs over eight NVFP4 [4096×4096] weights take about half the time fused (the bench's layer row).
   */
  private fused(x: Uint16Array, rows: number, lw: LinearWeight, code: number, alpha: number, r0: number, n: number): Uint16Array | null {
    const whole = r0 === 0 && n === lw.out;
    const N = this.N;
    if (lw.scale === null) return null;
    if ((lw.format === 'mxfp4' || lw.format === 'nvfp4') && (whole || code === 0)) {
      const block = lw.format === 'mxfp4' ? 32 : 16;
      const pb = lw.in / 2, sb = lw.in / block;
      const packed = lw.weight.bytes.subarray(r0 * pb, (r0 + n) * pb), scale = lw.scale.bytes.subarray(r0 * sb, (r0 + n) * sb);
      if (lw.format === 'mxfp4') return N.gemmMxfp4F16(x, packed, scale, rows, lw.in, n, alpha, code);
      const g = lw.global!;
      return N.gemmNvfp4F16(x, packed, scale, rows, lw.in, n, g.value, g.op === 'div', alpha, code);
    }
    if (lw.format === 'fp8-block' && fp8SliceAligned(lw, r0, n, code)) {
      const [bo, bi] = lw.block;
      const sw = (lw.scale.dtype === 'F32' ? 4 : 1) * Math.ceil(lw.in / bi); // one block row's scale bytes
      const scale = lw.scale.bytes.subarray((r0 / bo) * sw, Math.ceil((r0 + n) / bo) * sw);
      return N.gemmFp8F16(x, lw.weight.bytes.subarray(r0 * lw.in, (r0 + n) * lw.in), scale, lw.scale.dtype === 'F32', rows, lw.in, n, bo, bi, alpha, code);
    }
    if (lw.format === 'bnb4' && whole && bnb4WholeRows(lw)) {
      const [weight, absmax, isCodes, map, nestedAbsmax, nestedMap, offset, nestedBs, , , bs] = bnb4Args(lw, code);
      return N.gemmBnb4F16(x, weight, absmax, isCodes, map, nestedAbsmax, nestedMap, offset, nestedBs, rows, lw.in, lw.out, bs, alpha, code);
    }
    return null;
  }

  /**
   * use(lw's FP16 weights) for one product, the copy freed as soon as use returns (where dequant made one: an F16
   * weight's view of its stored bytes is left alone). A routed expert's 16 MiB copy left to the collector was
   * usually still alive when the next expert's was made, so each was written into memory the caches no longer held:
   * 32 NVFP4 experts [2048×4096] at 16 rows took 69–76 ms through dequant + gemmF16, and 39–57 ms when each copy is
   * freed here and the next one reuses its memory while the cache still holds it (round 25, the CLI's allocator).
   * use must not keep its argument.
   */
  once<T>(lw: LinearWeight, fault: FaultId | null, use: (w: Uint16Array) => T): T {
    const w = this.dequant(lw, fault);
    const result = use(w);
    const b = w.buffer;
    if (b !== lw.weight.bytes.buffer && b instanceof ArrayBuffer && w.byteOffset === 0 && w.byteLength === b.byteLength) detachBuffer(b);
    return result;
  }

  /**
   * The same FP16 weights without keeping them: for weights too many to hold at once, such as a layer's
   * routed experts (DESIGN §10: 256 experts × 3 × 2048×4096 would be 12 GiB of FP16 per layer).
   */
  dequant(lw: LinearWeight, fault: FaultId | null): Uint16Array {
    // An F16 weight (the FP16 cache's) is already what the device holds, and no fault touches plain weights:
    // dequantToF16 would only copy it (memcpy in dequant.cc), so hand out a view and hold it once.
    const b = lw.weight.bytes;
    if (lw.format === 'plain' && lw.weight.dtype === 'F16' && b.byteOffset % 2 === 0 && b.byteLength === lw.out * lw.in * 2) return new Uint16Array(b.buffer, b.byteOffset, lw.out * lw.in);
    const code = faultCode(fault);
    if (lw.format === 'nvfp4') {
      const g = lw.global!;
      return this.N.dequantNvfp4ToF16(lw.weight.bytes, lw.scale!.bytes, lw.out, lw.in, g.value, g.op === 'div', code);
    }
    if (lw.format === 'bnb4') return this.N.dequantBnb4ToF16(...bnb4Args(lw, code));
    const kind = lw.format === 'plain' ? PLAIN_KIND[lw.weight.dtype] : KIND[lw.format as keyof typeof KIND];
    return this.N.dequantToF16(kind, lw.weight.bytes, lw.scale?.bytes ?? null, lw.scale?.dtype === 'F32', lw.out, lw.in, lw.block[0], lw.block[1], code);
  }
}

/**
 * A stored non-linear tensor (norm weight, embedding or head rows) as the device holds it: decoded to f32 and
 * rounded to f16 once. An F16 tensor is handed out as it is (a view): f16 → f32 → f16 is the identity for every
 * f16 value but non-canonical NaNs, and the FP16 cache holds what f32ToF16 wrote (canonical NaNs only).
 */
export function storedToF16(N: DeviceNative, t: StoredTensor): Uint16Array {
  const n = t.shape.reduce((a, b) => a * b, 1);
  if (t.dtype === 'F16' && t.bytes.byteOffset % 2 === 0) return new Uint16Array(t.bytes.buffer, t.bytes.byteOffset, n);
  // BF16 (embedding and head rows: up to 0.5 G elements a pass) in one native pass with the same element rule
  // (ld_bf16_to_f16 = ld_f32_to_f16 of the widened bits, what f32ToF16 of decodeToF32's output computes).
  if (t.dtype === 'BF16' && n > 0) {
    const rows = t.shape.length > 1 ? t.shape[0] : 1;
    return N.dequantToF16(PLAIN_KIND.BF16, t.bytes, null, false, rows, n / rows, 1, 1, 0);
  }
  return N.f32ToF16(decodeToF32(t.dtype, t.bytes, n));
}

/**
 * x f16 [rows, n] + bias f16 [n] repeated per row: the unfused bias add of an FP16 path (ld_add_f16 after the
 * GEMM's own FP16 rounding, so the sum is rounded twice, as on the device); x itself when bias is null.
 */
export function addBiasRowsF16(N: DeviceNative, x: Uint16Array, rows: number, bias: Uint16Array | null): Uint16Array {
  if (bias === null) return x;
  if (x.length !== rows * bias.length) throw new Error(`addBiasRowsF16: a bias of ${bias.length} for rows of ${x.length / rows}`);
  const tiled = new Uint16Array(rows * bias.length);
  for (let r = 0; r < rows; r++) tiled.set(bias, r * bias.length);
  return N.addF16(x, tiled);
}

/**
 * The device head: x [S, D] (FP32, stored to FP16 as the device holds it) · headᵀ → FP32 logits [S, V], the
 * [V, D] head read in 4096-row chunks, each converted to FP16 (storedToF16) and multiplied with FP32
 * accumulation and FP32 output (what a sampler consumes). Every architecture's device path uses it.
 */
export function deviceHeadLogits(N: DeviceNative, m: { forEachHeadChunk(rows: number, fn: (r0: number, chunk: StoredTensor) => void): void }, x: Float32Array, S: number, D: number, V: number): Float32Array {
  const xh = N.f32ToF16(x);
  const out = new Float32Array(S * V);
  // each chunk's bytes are read into the buffer the last chunk's were (released once its product is taken)
  // (the process's pool: warm buffers the layers released)
  const pool = sharedReadPool();
  const mark = pool.mark();
  withReadPool(pool, () =>
    m.forEachHeadChunk(4096, (r0, chunk) => {
      const n = chunk.shape[0];
      const part = N.gemmF16F32(xh, storedToF16(N, chunk), S, D, n);
      for (let s = 0; s < S; s++) out.set(part.subarray(s * n, (s + 1) * n), s * V + r0);
      pool.release(mark);
    }),
  );
  return out;
}

