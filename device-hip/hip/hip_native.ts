/**
 * The `hip` device backend's TypeScript side: the `ld_hip` addon (device-hip/hip/addon_hip.cc) probes the HIP
 * runtime with dlopen("libamdhip64.so") at run time — no link-time ROCm dependency — and, on a machine with an
 * AMD GPU, runs the DeviceNative, DeepseekNative and DecodeNative ops through the kernels' code object
 * (hipModuleLoadData / hipModuleLaunchKernel). The addon also exposes the kernels' host reference (ld_host_ref.h)
 * for the CPU tests.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { packageRoot } from '../../harness/version.js';
import {
  type DecodeNative,
  type DeepseekNative,
  type DeviceNative,
  type GptOssNative,
  loadDeviceNative,
  validatedDecodeNative,
  validatedDeepseekNative,
  validatedDeviceNative,
  validatedGptOssNative,
} from '../binding.js';

/** What `probe()` found; `error` is empty only when a device with a readable gfx arch is there. */
export interface HipProbe {
  library: boolean;
  libraryName: string;
  deviceCount: number;
  deviceName: string;
  /** gcnArchName of device 0, e.g. "gfx90a:sramecc+:xnack-" */
  arch: string;
  runtimeVersion: number;
  driverVersion: number;
  error: string;
}

type GpuOps = Pick<DeviceNative, 'dequantToF16' | 'dequantNvfp4ToF16' | 'dequantBnb4ToF16' | 'gemmF16' | 'gemmF16F32' | 'rmsnormF16' | 'ropeF16' | 'attentionF16' | 'swigluF16' | 'addF16' | 'mulScalarF16'>;

/** The kernels' host-side expected values (ld_host_ref.h): what the device check compares the GPU with. */
export interface HostRef {
  refDequantToF16: DeviceNative['dequantToF16'];
  refDequantNvfp4ToF16: DeviceNative['dequantNvfp4ToF16'];
  refDequantBnb4ToF16: DeviceNative['dequantBnb4ToF16'];
  refGemmF16: DeviceNative['gemmF16'];
  refGemmF16F32: DeviceNative['gemmF16F32'];
  /** the fused MXFP4 GEMM: packed [n, k/2], E8M0 scale [n, k/32] */
  refGemmMxfp4F16(x: Uint16Array, packed: Uint8Array, scale: Uint8Array, m: number, k: number, n: number, alpha: number, fault: number): Uint16Array;
  refRmsnormF16: DeviceNative['rmsnormF16'];
  refRopeF16: DeviceNative['ropeF16'];
  refAttentionF16: DeviceNative['attentionF16'];
  /** row softmax as the attention kernels do it, P = f16(e/l); z f32 [rows, n], sinks f32 [rows] or null */
  refSoftmaxF16(z: Float32Array, sinks: Float32Array | null, rows: number, n: number): Uint16Array;
  refSwigluF16: DeviceNative['swigluF16'];
  refAddF16: DeviceNative['addF16'];
  refMulScalarF16: DeviceNative['mulScalarF16'];
  /** y[r] = x[token[r]] */
  refMoeGatherF16(x: Uint16Array, token: Int32Array, T: number, D: number): Uint16Array;
  /** moeCombineF16's signature and order */
  refMoeCombineF16(y: Uint16Array, rowToken: Int32Array, shared: Uint16Array, T: number, D: number): Uint16Array;
  /** ld_sinkhorn_f32 per token: A f32 [T, hc, hc] */
  refSinkhornF32(A: Float32Array, T: number, hc: number, iters: number, eps: number): Float32Array;
  /** the DeepSeek-V4 kernels' expected values (deepseek.hip), with the ld_device addon's signatures */
  refHcPreF16: DeepseekNative['hcPreF16'];
  refHcHeadF16: DeepseekNative['hcHeadF16'];
  refHcPostF16: DeepseekNative['hcPostF16'];
  refCompressPoolF16: DeepseekNative['compressPoolF16'];
  refRouterF32: DeepseekNative['routerF32'];
  refSwigluRowsF16: DeepseekNative['swigluRowsF16'];
  refIndexerTopkF16: DeepseekNative['indexerTopkF16'];
  refSparseAttentionF16: DeepseekNative['sparseAttentionF16'];
  /** the decode kernel's expected values (ld_attention_decode), attentionDecodeF16's signature */
  refAttentionDecodeF16: DecodeNative['attentionDecodeF16'];
  /** the gpt-oss kernels' expected values (gpt_oss.hip), with the ld_device addon's signatures */
  refOssRouterF32: GptOssNative['ossRouterF32'];
  refOssSwigluF16: GptOssNative['ossSwigluF16'];
}

/** The addon's GPU ops: DeviceNative's kernels, and all of DeepseekNative and DecodeNative (same signatures). */
export interface HipAddon extends GpuOps, DeepseekNative, DecodeNative, GptOssNative, HostRef {
  probe(): HipProbe;
  /** load the runtime, the code object and its kernels, run the self-check; throws with what failed */
  open(codeObjectPath: string): void;
}

function buildDir(): string {
  return path.join(packageRoot(), 'device-hip', 'build', 'Release');
}

let addon: HipAddon | null | undefined;

/** The ld_hip addon, or null when `npm run build:native` has not built it. */
export function loadHipAddon(): HipAddon | null {
  if (addon !== undefined) return addon;
  const file = path.join(buildDir(), 'ld_hip.node');
  addon = fs.existsSync(file) ? (createRequire(import.meta.url)(file) as HipAddon) : null;
  return addon;
}

/** Probe the HIP runtime; never throws. */
export function probeHip(): HipProbe {
  const a = loadHipAddon();
  if (a === null) {
    return { library: false, libraryName: '', deviceCount: 0, deviceName: '', arch: '', runtimeVersion: 0, driverVersion: 0, error: 'the ld_hip addon is not built (run npm run build:native)' };
  }
  return a.probe();
}

/** HIP's packed version (major·10⁷ + minor·10⁵ + patch) as "5.2.21153". */
export function hipVersion(v: number): string {
  if (!(v > 0)) return 'unknown';
  return `${Math.floor(v / 10_000_000)}.${Math.floor(v / 100_000) % 100}.${v % 100_000}`;
}

/** What stops the hip backend, in words, or null when the probe found a usable device. */
export function hipProblem(p: HipProbe): string | null {
  if (!p.library) {
    return `the HIP runtime was not found (${p.error}); install ROCm, or set LAYERDIFF_HIP_LIB to libamdhip64.so's path`;
  }
  if (p.deviceCount === 0) return `${p.libraryName} (HIP ${hipVersion(p.runtimeVersion)}) loaded but no AMD GPU is visible: ${p.error.replace(/^no device: /, '')}`;
  if (p.arch === '') return `found ${p.deviceName || 'a device'} but could not read its gfx architecture: ${p.error}`;
  return null;
}

/**
 * The code object for a gfx target: build/Release/ld_kernels_<gfx>.co, built at install when the machine had
 * an AMD GPU; otherwise built now with hipcc (device-hip/hip/build-code-object.sh) when hipcc is there.
 */
export function codeObjectFor(gfx: string): { file: string } | { error: string } {
  const dir = buildDir();
  const file = path.join(dir, `ld_kernels_${gfx}.co`);
  if (!fs.existsSync(file)) {
    const script = path.join(packageRoot(), 'device-hip', 'hip', 'build-code-object.sh');
    spawnSync('bash', [script, dir], { env: { ...process.env, LAYERDIFF_BUILD_HIP: '1', LAYERDIFF_HIP_ARCH: gfx }, stdio: 'ignore' });
  }
  if (fs.existsSync(file)) return { file };
  let why = 'hipcc did not produce it';
  try {
    why = fs.readFileSync(path.join(dir, 'ld_kernels.status'), 'utf8').trim();
  } catch {
    /* no status file: keep the generic reason */
  }
  return { error: `no kernels code object for ${gfx} (${why}); install hipcc (ROCm) and run npm run build:native` };
}

/** The hip backend's three native surfaces, argument-checked like the emulation's. */
export interface HipNatives {
  native: DeviceNative;
  deepseek: DeepseekNative;
  decode: DecodeNative;
  /** gpt-oss's router and SwiGLU; null from an ld_hip.node built before they were wired */
  gptOss: GptOssNative | null;
  codeObject: string;
}

/**
 * Open the hip backend on the probed device: DeviceNative with dequant, GEMM, RMSNorm, RoPE, attention, SwiGLU,
 * add and scalar multiply on the GPU, the whole DeepseekNative (hc pre/post/head, compressor pooling, indexer
 * top-k, sparse attention, router, expert SwiGLU rows, MoE combine), DecodeNative (the KV-cache attention)
 * and GptOssNative (router, SwiGLU) on the GPU; the f16/bf16/f32 conversions and setSimd() are host-side and come from the emulation addon
 * (they are exact conversions, not device numerics). Throws Error saying what failed.
 */
export function openHipNative(p: HipProbe): HipNatives {
  const a = loadHipAddon();
  if (a === null) throw new Error('the ld_hip addon is not built (run npm run build:native)');
  // An ld_hip.node built before the DeepSeek-V4/decode ops were wired would fail only mid-run: refuse up front.
  if (typeof a.hcPreF16 !== 'function' || typeof a.attentionDecodeF16 !== 'function' || typeof a.dequantBnb4ToF16 !== 'function') {
    throw new Error('the ld_hip addon lacks the DeepSeek-V4, decode or FP4-format GPU ops (built from older sources): rebuild it with npm run build:native');
  }
  const gfx = p.arch.split(':')[0] ?? p.arch;
  const co = codeObjectFor(gfx);
  if ('error' in co) throw new Error(co.error);
  a.open(co.file);
  const host = loadDeviceNative();
  const raw: DeviceNative = {
    dequantToF16: (...args) => a.dequantToF16(...args),
    gemmF16: (...args) => a.gemmF16(...args),
    gemmF16F32: (...args) => a.gemmF16F32(...args),
    rmsnormF16: (...args) => a.rmsnormF16(...args),
    ropeF16: (...args) => a.ropeF16(...args),
    attentionF16: (...args) => a.attentionF16(...args),
    swigluF16: (...args) => a.swigluF16(...args),
    addF16: (...args) => a.addF16(...args),
    mulScalarF16: (...args) => a.mulScalarF16(...args),
    dequantNvfp4ToF16: (...args) => a.dequantNvfp4ToF16(...args),
    dequantBnb4ToF16: (...args) => a.dequantBnb4ToF16(...args),
    f32ToF16: (x) => host.f32ToF16(x),
    f16ToF32: (x) => host.f16ToF32(x),
    bf16ToF16: (x) => host.bf16ToF16(x),
    info: () => ({ ...host.info(), backend: 'hip' }),
    setSimd: (mode) => host.setSimd(mode),
  };
  const gptOss = typeof a.ossRouterF32 === 'function' ? validatedGptOssNative(a) : null;
  return { native: validatedDeviceNative(raw), deepseek: validatedDeepseekNative(a), decode: validatedDecodeNative(a), gptOss, codeObject: co.file };
}
