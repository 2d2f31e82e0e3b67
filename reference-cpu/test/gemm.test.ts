/**
 * The reference path's native FP32 GEMM (reference-cpu/native/gemm_f32.cc) against a float64 triple loop.
 *
 * Tolerance, per element: |y − y64| ≤ γ(n)·Σ_k |x_k·w_k| with n = ⌈k/8⌉ + 3 and γ(n) = n·u/(1 − n·u),
 * u = 2^-24. Why: the kernel sums each of 8 lanes recursively with fmaf (≤ ⌈k/8⌉ roundings on any
 * term's path) and then adds the lanes pairwise in 3 levels, and recursive summation of that depth is
 * bounded by γ(depth)·Σ|terms| (Higham, Accuracy and Stability, §4.2). The float64 loop's own error is
 * ~2^-29 times smaller and ignored. The bound is rigorous, so any excess is a kernel bug, not bad luck.
 */
import * as fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { Rng } from '../../harness/rng.js';
import { gemmF32, referenceNativeInfo, setReferenceSimd } from '../native.js';

afterEach(() => {
  setReferenceSimd('auto');
});

function randomF32(seed: number, n: number, amp: number): Float32Array {
  const r = new Rng(seed);
  return Float32Array.from({ length: n }, () => (r.uniform() * 2 - 1) * amp);
}

/** float64 y = x·Wᵀ and Σ|x·w| per element. */
function gemm64(x: Float32Array, w: Float32Array, m: number, k: number, n: number): { y: Float64Array; mag: Float64Array } {
  const y = new Float64Array(m * n), mag = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
    let s = 0, a = 0;
    for (let t = 0; t < k; t++) {
      const p = x[i * k + t] * w[j * k + t];
      s += p;
      a += Math.abs(p);
    }
    y[i * n + j] = s;
    mag[i * n + j] = a;
  }
  return { y, mag };
}

describe('gemmF32', () => {
  const SHAPES: Array<[number, number, number]> = [
    [16, 4096, 64], [1, 4096, 33], [5, 100, 7], [3, 7, 5], [17, 1037, 13], [2, 520, 4], [4, 8, 1],
    // the AVX-512 pair tiles' edges: an odd row in a 2-pair tile (m = 3), a 1-pair tile after 3-pair ones (m = 7, 8,
    // 13, 14), a slice of 8 after a full one (k = 1032), k tails beside n tails
    [3, 40, 9], [7, 2056, 17], [8, 1032, 9], [13, 64, 8], [14, 29, 3],
  ];
  SHAPES.forEach(([m, k, n], s) => {
    it(`gemm_f32(m=${m},k=${k},n=${n})`, () => {
      const x = randomF32(500 + s, m * k, 3), w = randomF32(600 + s, n * k, 0.05);
      const y = gemmF32(x, w, m, k, n);
      expect(y.every(Number.isFinite), 'no NaN/Inf from finite inputs').toBe(true);
      const { y: want, mag } = gemm64(x, w, m, k, n);
      const depth = Math.ceil(k / 8) + 3, u = 2 ** -24;
      const gamma = (depth * u) / (1 - depth * u);
      let worst = 0;
      for (let i = 0; i < y.length; i++) {
        const bound = gamma * mag[i];
        const err = Math.abs(y[i] - want[i]);
        expect(err, `element ${i}: ${y[i]} vs ${want[i]}, bound ${bound}`).toBeLessThanOrEqual(bound);
        worst = Math.max(worst, err / bound);
      }
      expect(worst).toBeLessThan(1);
      // Every kernel level follows the same order: identical bits.
      for (const mode of ['avx2', 'scalar'] as const) {
        const level = setReferenceSimd(mode);
        const ys = gemmF32(x, w, m, k, n);
        for (let i = 0; i < y.length; i++) if (!Object.is(ys[i], y[i])) expect.fail(`${level} kernel differs at ${i}: ${ys[i]} vs ${y[i]}`);
      }
      setReferenceSimd('auto');
    });
  });

  it('gemm_f32(m=4,k=19,n=6): NaN and Inf reach exactly their row and column', () => {
    const m = 4, k = 19, n = 6;
    const x = randomF32(9, m * k, 1), w = randomF32(19, n * k, 1);
    x[2 * k + 3] = NaN;
    w[4 * k + 17] = Infinity;
    const y = gemmF32(x, w, m, k, n);
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
      const v = y[i * n + j];
      if (i === 2) expect(Number.isNaN(v)).toBe(true);
      else if (j === 4) expect(Math.abs(v)).toBe(Infinity);
      else expect(Number.isFinite(v)).toBe(true);
    }
  });

  it('gemm_f32(m=5,k=45,n=11): NaN and Inf inside the SIMD part reach exactly their row and column, at every level', () => {
    // the NaN in x row 3 (a pair's high half), the Inf in W's last row (n % 8 ≠ 0: the block's missing rows repeat it)
    const m = 5, k = 45, n = 11;
    const x = randomF32(31, m * k, 1), w = randomF32(32, n * k, 1);
    x[3 * k + 5] = NaN;
    w[10 * k + 9] = -Infinity;
    const auto = gemmF32(x, w, m, k, n);
    for (const mode of ['auto', 'avx2', 'scalar'] as const) {
      setReferenceSimd(mode);
      const y = gemmF32(x, w, m, k, n);
      for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
        const v = y[i * n + j];
        if (i === 3) expect(Number.isNaN(v), `${mode} (${i}, ${j})`).toBe(true);
        else if (j === 10) expect(Math.abs(v), `${mode} (${i}, ${j})`).toBe(Infinity);
        else expect(Number.isFinite(v), `${mode} (${i}, ${j})`).toBe(true);
        expect(Object.is(v, auto[i * n + j]), `${mode} (${i}, ${j}) has the bits of auto`).toBe(true);
      }
    }
  });

  it('auto is the best kernel the CPU has (so the AVX-512 pair tiles are what the other tests run where it exists)', () => {
    const cpu = fs.existsSync('/proc/cpuinfo') ? fs.readFileSync('/proc/cpuinfo', 'utf8') : '';
    if (cpu === '') return;
    const want = /\bavx512f\b/.test(cpu) ? 'avx512' : /\bavx2\b/.test(cpu) && /\bfma\b/.test(cpu) ? 'avx2' : 'scalar';
    expect(referenceNativeInfo().simd).toBe(want);
  });

  it('gemm_f32(m=3,k=21,n=5): results do not depend on byteOffset; guards untouched', () => {
    const m = 3, k = 21, n = 5;
    const x = randomF32(10, m * k, 1), w = randomF32(20, n * k, 1);
    const want = gemmF32(x, w, m, k, n);
    const bx = new Float32Array(m * k + 10).fill(-7.25), bw = new Float32Array(n * k + 6).fill(-7.25);
    bx.set(x, 3);
    bw.set(w, 5);
    const got = gemmF32(bx.subarray(3, 3 + m * k), bw.subarray(5, 5 + n * k), m, k, n);
    expect(Array.from(got)).toEqual(Array.from(want));
    expect([...bx.subarray(0, 3), ...bx.subarray(3 + m * k)].every((v) => v === -7.25)).toBe(true);
    expect([...bw.subarray(0, 5), ...bw.subarray(5 + n * k)].every((v) => v === -7.25)).toBe(true);
  });

  it('rejects bad shapes and types with the shapes in the message', () => {
    expect(() => gemmF32(new Float32Array(10), new Float32Array(8), 2, 4, 2)).toThrow(/x has 10 elements, expected m×k \[2×4\]/);
    expect(() => gemmF32(new Float32Array(8), new Float32Array(8), 2, 4, 3)).toThrow(RangeError);
    expect(() => gemmF32(new Float64Array(8) as unknown as Float32Array, new Float32Array(8), 2, 4, 2)).toThrow(TypeError);
    expect(() => gemmF32(new Float32Array(8), new Float32Array(8), 2, 4, 0)).toThrow(RangeError);
  });

  it('reports its kernel', () => {
    const info = referenceNativeInfo();
    expect(['avx512', 'avx2', 'scalar']).toContain(info.simd);
    expect(info.openmpThreads).toBeGreaterThan(0);
  });
});
