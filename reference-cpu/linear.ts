/**
 * y = x·Wᵀ for a stored LinearWeight, dequantized exactly (reference-cpu/dequant.ts, native) inside the native GEMM
 * (linearExact), for every architecture's reference. Real linears are large (DeepSeek-V4's wq_b and wo_a are
 * 32768×1024 / 8192×4096, a routed expert's w1 2048×4096; gpt-oss-20b's expert gate_up 5760×2880): a whole FP32 copy
 * would be 16–128 MiB per matrix, written and read back for a product of a few rows. The bits are those of matmul
 * over the whole dequantized weight (each output is one row of x against one row of W, summed in the kernel's fixed
 * order); the output [rows, out] is the caller's.
 */
import type { LinearWeight } from '../harness/formats/linear.js';
import { dequantRowsExact, exactOperands } from './dequant.js';
import { linearExact } from './native.js';
import { matmul } from './ops.js';

export const TILE_ROWS = 256;

/** Output rows [r0, r0+n) of W, dequantized exactly: [n, in] (rows are independent in every format, §3). */
export function dequantRows(lw: LinearWeight, r0: number, n: number): Float32Array {
  return dequantRowsExact(lw, r0, n);
}

/**
 * x [rows, in] · W[r0:r0+n]ᵀ → [rows, n]. W is decoded exactly inside the native GEMM, a few rows at a time
 * (linearExact): no FP32 tile is allocated. The bits are those of matmul over dequantRows tiles of any size
 * (each output is one row of x against one row of W, summed in the kernel's fixed order); `tileRows` is kept
 * for the tests that prove it.
 */
export function linearRows(x: Float32Array, rows: number, lw: LinearWeight, r0: number, n: number, tileRows = TILE_ROWS): Float32Array {
  if (x.length !== rows * lw.in) throw new Error(`${lw.name}: input holds ${x.length} values, want ${rows} × ${lw.in}`);
  if (n === 0 || rows === 0) return new Float32Array(rows * n);
  if (tileRows !== TILE_ROWS) return linearTiled(x, rows, lw, r0, n, tileRows);
  const e = exactOperands(lw);
  const r = linearExact(x, rows, e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, r0, n);
  if (r.firstNonFinite >= 0) dequantRowsExact(lw, Math.floor(r.firstNonFinite / lw.in), 1); // throws the named InputError
  return r.y;
}

/** The same product over explicit dequantized tiles (matmul per tile): the second computation tests compare with. */
function linearTiled(x: Float32Array, rows: number, lw: LinearWeight, r0: number, n: number, tileRows: number): Float32Array {
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
