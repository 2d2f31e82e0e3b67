/**
 * Matrix-product and dequant throughput, measured side by side in one process:
 *   - reference gemmF32 vs onnxruntime-node's MatMul (CPU EP, 2 intra-op threads, weight as an
 *     initializer) on [16×4096]×[4096×4096]; the target is reference ≥ 1.0× ORT;
 *   - MXFP4 dequant on a [2048×4096] weight, in packed bytes read per second, against a memcpy of the same
 *     packed bytes in the same run: the device emulation (to f16) and the reference's exact decoder (to f32);
 *   - the fused 4-bit GEMMs the device path multiplies MXFP4, NVFP4 and bitsandbytes weights with (gemmMxfp4F16,
 *     gemmNvfp4F16, gemmBnb4F16) against gemmF16 on the dequantized weight and against dequant + gemmF16, and their
 *     packed-byte rates against the same memcpy;
 *   - the emulated device's gemmF16 vs the reference gemmF32 at real widths (target: ≤ 2× the time);
 *   - a decode step's FP8-block linear: the fused FP8 GEMM (gemmFp8F16) against gemmF16 on the FP16 copy, m = 1.
 * Each figure is the median of several timed runs after warm-up, the two sides of a comparison timed in
 * alternating blocks (see timeBlocks).
 *
 *   npm run build:ts && node dist/scripts/bench/gemm.js
 */
import { pathToFileURL } from 'node:url';
import { loadDeviceNative } from '../../device-hip/binding.js';
import { NF4_VALUES } from '../../harness/formats/dtypes.js';
import { detachBuffer } from '../../harness/io/map.js';
import { Rng } from '../../harness/rng.js';
import { dequantExact, gemmF32, referenceNativeInfo } from '../../reference-cpu/native.js';
import { buildModel, createSession, f32, runSession } from '../onnx/graph.js';
import { simdLevel } from '../../harness/io/addon.js';
import { rerunAsTheCli } from './as_cli.js';
import { median } from './median.js';

const WARMUP = 3;
const RUNS = 11;

/** Free a dequantized copy where the device path frees it (detachBuffer): left to the collector, the next one would be
 *  written into memory the cache no longer holds whenever a collection happened not to run (round 25). */
function freed(y: Uint16Array): void {
  if (y.buffer instanceof ArrayBuffer && !detachBuffer(y.buffer)) throw new Error('bench: a dequantized copy could not be freed');
}

function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/**
 * Median milliseconds of each function. Each is timed in its own block (warm-up, then RUNS runs), and the
 * blocks are repeated in two rounds, A B A B: alternating call by call would make each side run while
 * the other's idle worker threads still spin (ORT's pool and OpenMP both spin-wait), slowing both.
 */
export async function timeBlocks(fns: Array<() => unknown>, runs = RUNS): Promise<number[]> {
  const times = fns.map(() => [] as number[]);
  for (let round = 0; round < 2; round++) {
    for (let j = 0; j < fns.length; j++) {
      await new Promise((resolve) => setTimeout(resolve, 100)); // let the previous block's spinning workers sleep
      for (let i = 0; i < WARMUP; i++) await fns[j]();
      for (let r = 0; r < runs; r++) {
        const t0 = nowMs();
        await fns[j]();
        times[j].push(nowMs() - t0);
      }
    }
  }
  return times.map(median);
}

function randomF32(seed: number, n: number): Float32Array {
  const r = new Rng(seed);
  return Float32Array.from({ length: n }, () => r.uniform() * 2 - 1);
}

const gflops = (m: number, k: number, n: number, ms: number) => (2 * m * k * n) / (ms * 1e6);

export async function benchGemm(): Promise<Record<string, number>> {
  const dev = loadDeviceNative();
  const out: Record<string, number> = {};
  const info = referenceNativeInfo();
  console.log(`gemm bench: reference kernel ${info.simd}, ${info.openmpThreads} OpenMP threads; device ${dev.info().simd}`);
  // LAYERDIFF_SIMD lowers this tool's kernels only: onnxruntime still picks its own widest ones on this CPU
  if (simdLevel() !== 'auto') console.log(`  (LAYERDIFF_SIMD=${simdLevel()}: onnxruntime-node still runs its widest kernels here, so gemm_f32_vs_ort is not what a host of that level compares)`);

  // 1. reference gemmF32 vs ORT MatMul, y = x·Wᵀ with W [n, k]; ORT gets B = Wᵀ [k, n] as an initializer.
  {
    const m = 16, k = 4096, n = 4096;
    const x = randomF32(1, m * k), w = randomF32(2, n * k);
    const b = new Float32Array(k * n);
    for (let j = 0; j < n; j++) for (let t = 0; t < k; t++) b[t * n + j] = w[j * k + t];
    const session = await createSession(
      buildModel({
        inputs: [{ name: 'x', shape: [m, k] }],
        outputs: [{ name: 'y', shape: [m, n] }],
        initializers: [f32('b', [k, n], b)],
        nodes: [{ op: 'MatMul', inputs: ['x', 'b'], outputs: ['y'] }],
      }),
      { intraOpNumThreads: 2 },
    );
    try {
      const feeds = { x: { data: x, dims: [m, k] } };
      const [refMs, ortMs] = await timeBlocks([() => gemmF32(x, w, m, k, n), () => runSession(session, feeds)]);
      out['gemm_f32(m=16,k=4096,n=4096).gflops'] = gflops(m, k, n, refMs);
      out['ort_matmul(m=16,k=4096,n=4096).gflops'] = gflops(m, k, n, ortMs);
      out['gemm_f32_vs_ort.ratio'] = ortMs / refMs;
    } finally {
      await session.release();
    }
  }

  // 2. MXFP4 dequant of a [2048×4096] weight: 4 MiB packed + 256 KiB scales in, 16 MiB f16 out.
  {
    const o = 2048, i = 4096;
    const r = new Rng(3);
    const packed = Uint8Array.from({ length: (o * i) / 2 }, () => r.int(256));
    const scales = Uint8Array.from({ length: (o * i) / 32 }, () => 118 + r.int(16));
    // memcpy yardstick: the same packed bytes copied (Uint8Array.set is a memcpy), timed in the same blocks.
    const copy = new Uint8Array(packed.length);
    const [ms, refMs, cpMs] = await timeBlocks([
      () => dev.dequantToF16(0, packed, scales, false, o, i, 1, 32, 0),
      () => dequantExact('mxfp4', packed, scales, o, i, 1, 32, 0, o),
      () => copy.set(packed),
    ]);
    out['mxfp4_dequant(out=2048,in=4096).ms'] = ms;
    out['mxfp4_dequant(out=2048,in=4096).packed_gbps'] = packed.length / (ms * 1e6);
    out['mxfp4_dequant_exact_f32(out=2048,in=4096).packed_gbps'] = packed.length / (refMs * 1e6);
    out['memcpy(packed 4 MiB).gbps'] = packed.length / (cpMs * 1e6);
    out['mxfp4_dequant_vs_memcpy.ratio'] = cpMs / ms;
    out['mxfp4_dequant_exact_f32_vs_memcpy.ratio'] = cpMs / refMs;
    // The device multiplies 4-bit weights without a materialised f16 copy: the fused GEMMs decode each block of
    // rows into L2 inside the product (gemmMxfp4F16; gemmNvfp4F16 and gemmBnb4F16 through their row sources). Each
    // one's cost over the plain FP16 GEMM on the already-dequantized weight is what dequantization costs the device
    // path now; dequant + gemm beside it. The same packed bytes as an NVFP4 weight (E4M3 scales of 16 as ModelOpt
    // writes them) and as a bitsandbytes NF4 one (F32 absmax per 64).
    const m = 16;
    const x = dev.f32ToF16(randomF32(4, m * i));
    const e4 = Uint8Array.from({ length: (o * i) / 16 }, () => 0x28 + r.int(0x30));
    const absmax = new Uint8Array(Float32Array.from({ length: (o * i) / 64 }, () => 0.01 + r.int(1000) / 20000).buffer);
    const nf4 = Float32Array.from(NF4_VALUES), none = new Float32Array(0);
    const formats: [string, () => Uint16Array, () => Uint16Array][] = [
      ['mxfp4', () => dev.gemmMxfp4F16(x, packed, scales, m, i, o, 1, 0), () => dev.dequantToF16(0, packed, scales, false, o, i, 1, 32, 0)],
      ['nvfp4', () => dev.gemmNvfp4F16(x, packed, e4, m, i, o, 1.5e-4, false, 1, 0), () => dev.dequantNvfp4ToF16(packed, e4, o, i, 1.5e-4, false, 0)],
      ['bnb4', () => dev.gemmBnb4F16(x, packed, absmax, false, nf4, none, none, 0, 1, m, i, o, 64, 1, 0), () => dev.dequantBnb4ToF16(packed, absmax, false, nf4, none, none, 0, 1, o, i, 64, 0)],
    ];
    for (const [format, fused, dequant] of formats) {
      const w16 = dequant();
      const [fusedMs, plainMs, bothMs] = await timeBlocks([fused, () => dev.gemmF16(x, w16, m, i, o, 1), () => {
        const w = dequant();
        dev.gemmF16(x, w, m, i, o, 1);
        freed(w);
      }]);
      out[`gemm_${format}_fused(m=16,k=4096,n=2048).ms`] = fusedMs;
      out[`gemm_${format}_fused_vs_gemm_f16.time_ratio`] = fusedMs / plainMs;
      out[`gemm_${format}_fused_vs_dequant_then_gemm.time_ratio`] = fusedMs / bothMs;
      out[`gemm_${format}_fused.packed_gbps`] = packed.length / (fusedMs * 1e6);
      out[`gemm_${format}_fused_vs_memcpy.ratio`] = cpMs / fusedMs;
    }
  }

  // 2b. A layer's NVFP4 weights as a diff multiplies them: eight distinct [4096×4096] weights (64 MiB packed), each
  //     multiplied twice (the layer's accumulated and isolated runs) at 16 rows, fused (what LinearCache.product runs
  //     since round 26) against the held FP16 copies it replaced (each dequantized once, shared by both runs, all
  //     freed at the layer's end: 256 MiB of FP16 written and read back).
  {
    const [n, k, count, m] = [4096, 4096, 8, 16];
    const r = new Rng(32);
    const base = Uint8Array.from({ length: (n * k) / 2 }, () => r.int(256));
    const weights = Array.from({ length: count }, (_, j) => {
      const w = new Uint8Array(base.length), off = (j * 1_000_003) % base.length;
      w.set(base.subarray(off));
      w.set(base.subarray(0, off), base.length - off);
      return w;
    });
    const e4 = Uint8Array.from({ length: (n * k) / 16 }, () => 0x28 + r.int(0x30));
    const x = dev.f32ToF16(randomF32(6, m * k));
    const [fusedMs, heldMs] = await timeBlocks([
      () => { for (let run = 0; run < 2; run++) for (const w of weights) dev.gemmNvfp4F16(x, w, e4, m, k, n, 1.5e-4, false, 1, 0); },
      () => {
        const copies = weights.map((w) => dev.dequantNvfp4ToF16(w, e4, n, k, 1.5e-4, false, 0));
        for (let run = 0; run < 2; run++) for (const w of copies) dev.gemmF16(x, w, m, k, n, 1);
        copies.forEach(freed);
      },
    ]);
    out[`layer_nvfp4_fused(m=${m},${count}x[${n}x${k}],2 runs).ms`] = fusedMs;
    out[`layer_nvfp4_held_copies(m=${m},${count}x[${n}x${k}],2 runs).ms`] = heldMs;
    out['layer_nvfp4_fused_vs_held_copies.time_ratio'] = fusedMs / heldMs;
  }

  // 3. emulated gemmF16 vs reference gemmF32 at real widths: attention/shared (4096→4096), an expert
  //    projection (4096→2048), an expert down projection shape (1024→4096).
  for (const [m, k, n] of [[16, 4096, 4096], [16, 4096, 2048], [16, 1024, 4096]]) {
    const x = randomF32(10 + k, m * k), w = randomF32(20 + n, n * k);
    const xh = dev.f32ToF16(x), wh = dev.f32ToF16(w);
    const [f16Ms, f32Ms] = await timeBlocks([() => dev.gemmF16(xh, wh, m, k, n, 1), () => gemmF32(x, w, m, k, n)]);
    const id = `(m=${m},k=${k},n=${n})`;
    out[`gemm_f16${id}.ms`] = f16Ms;
    out[`gemm_f32${id}.ms`] = f32Ms;
    out[`gemm_f16_vs_f32${id}.time_ratio`] = f16Ms / f32Ms;
  }

  // 4. A decode step's FP8-block linear (m = 1): the fused FP8 GEMM on the stored bytes (what LinearCache.product
  //    runs at every row count) against gemmF16 on an FP16 copy, over eight wo_a-sized weights in turn (256 MiB of
  //    FP8, 512 MiB of F16: past the caches, as a step's weights are).
  {
    const [n, k, count] = [8192, 4096, 8];
    const r = new Rng(31);
    const base = Uint8Array.from({ length: n * k }, () => {
      const c = r.int(256);
      return (c & 0x7f) === 0x7f ? c - 1 : c; // no NaN codes
    });
    // the others: the base rotated by a prime number of bytes per weight (distinct memory, no more random draws)
    const fp8 = Array.from({ length: count }, (_, j) => {
      const w = new Uint8Array(n * k), off = (j * 1_000_003) % (n * k);
      w.set(base.subarray(off));
      w.set(base.subarray(0, off), n * k - off);
      return w;
    });
    const scale = Uint8Array.from({ length: (n / 128) * (k / 128) }, () => 118 + r.int(9));
    const f16 = fp8.map((w) => dev.dequantToF16(1, w, scale, false, n, k, 128, 128, 0));
    const x = dev.f32ToF16(randomF32(5, k));
    const [fusedMs, copyMs] = await timeBlocks([
      () => fp8.forEach((w) => dev.gemmFp8F16(x, w, scale, false, 1, k, n, 128, 128, 1, 0)),
      () => f16.forEach((w) => dev.gemmF16(x, w, 1, k, n, 1)),
    ]);
    out[`gemv_fp8_fused(m=1,k=${k},n=${n},x${count}).ms`] = fusedMs;
    out[`gemv_f16_copy(m=1,k=${k},n=${n},x${count}).ms`] = copyMs;
    out['gemv_fp8_fused_vs_f16_copy.speedup'] = copyMs / fusedMs;
  }

  for (const [key, v] of Object.entries(out)) console.log(`  ${key.padEnd(48)} ${v.toFixed(3)}`);
  return out;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) {
  benchGemm().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
