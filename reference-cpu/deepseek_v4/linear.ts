/**
 * y = x·Wᵀ for a stored LinearWeight, dequantized exactly (reference-cpu/dequant.ts) a tile of output rows at a
 * time. DeepSeek-V4's linears are large (wq_b and wo_a are 32768×1024 / 8192×4096, a routed expert's w1 is
 * 2048×4096): a whole FP32 copy would be 16–128 MiB per matrix, a 256-row tile is at most 256 × in × 4 bytes
 * (4 MiB at in = 4096, 8 MiB for wo_b's in = 8192). Peak extra memory of one call: one tile plus the
 * [rows, tile] partial product; the output [rows, out] is the caller's.
 */
import type { LinearWeight, StoredTensor } from '../../harness/formats/linear.js';
import { dequantLinear } from '../dequant.js';
import { matmul } from '../ops.js';

export const TILE_ROWS = 256;

function rowsOf(t: StoredTensor, r0: number, n: number, rows: number): StoredTensor {
  const rowBytes = t.bytes.byteLength / rows;
  const shape = [n, ...t.shape.slice(1)];
  return { ...t, shape, bytes: t.bytes.subarray(r0 * rowBytes, (r0 + n) * rowBytes) };
}

/**
 * Output rows [r0, r0+n) of W, dequantized: [n, in]. FP8 scales cover block[0] rows, so an unaligned range is
 * cut from the dequantized aligned range around it (the scale row of weight row o is ⌊o/block[0]⌋, §3).
 */
export function dequantRows(lw: LinearWeight, r0: number, n: number): Float32Array {
  if (r0 < 0 || n < 0 || r0 + n > lw.out) throw new Error(`${lw.name}: rows [${r0}, ${r0 + n}) outside [0, ${lw.out})`);
  if (lw.format !== 'fp8-block') {
    // plain rows and MXFP4 rows (scale per row and 32 inputs) are independent.
    const scale = lw.scale === null ? null : rowsOf(lw.scale, r0, n, lw.out);
    return dequantLinear({ ...lw, out: n, weight: rowsOf(lw.weight, r0, n, lw.out), scale });
  }
  const bo = lw.block[0];
  const a0 = Math.floor(r0 / bo) * bo;
  const a1 = Math.min(lw.out, Math.ceil((r0 + n) / bo) * bo);
  const nScaleRows = lw.scale!.shape[0];
  const scale = rowsOf(lw.scale!, a0 / bo, Math.ceil((a1 - a0) / bo), nScaleRows);
  const w = dequantLinear({ ...lw, out: a1 - a0, weight: rowsOf(lw.weight, a0, a1 - a0, lw.out), scale });
  return a0 === r0 && a1 === r0 + n ? w : w.slice((r0 - a0) * lw.in, (r0 - a0 + n) * lw.in);
}

/** x [rows, in] · W[r0:r0+n]ᵀ → [rows, n], W dequantized TILE_ROWS output rows at a time (native FP32 GEMM per tile). */
export function linearRows(x: Float32Array, rows: number, lw: LinearWeight, r0: number, n: number, tileRows = TILE_ROWS): Float32Array {
  if (x.length !== rows * lw.in) throw new Error(`${lw.name}: input holds ${x.length} values, want ${rows} × ${lw.in}`);
  // Keep FP8 tiles on scale-block boundaries so no block is dequantized twice.
  const bo = lw.format === 'fp8-block' ? lw.block[0] : 1;
  const tile = Math.max(bo, Math.floor(tileRows / bo) * bo);
  if (tile >= n) return matmul(x, rows, lw.in, dequantRows(lw, r0, n), n);
  const y = new Float32Array(rows * n);
  for (let a = r0; a < r0 + n; ) {
    const end = Math.min(r0 + n, (Math.floor(a / tile) + 1) * tile);
    const m = end - a;
    const part = matmul(x, rows, lw.in, dequantRows(lw, a, m), m);
    for (let s = 0; s < rows; s++) y.set(part.subarray(s * m, (s + 1) * m), s * n + (a - r0));
    a = end;
  }
  return y;
}

/** x [rows, in] · Wᵀ → [rows, out]. */
export function linear(x: Float32Array, rows: number, lw: LinearWeight, tileRows = TILE_ROWS): Float32Array {
  return linearRows(x, rows, lw, 0, lw.out, tileRows);
}
