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
import type { DeviceOps, HostRefOps } from '../ops/surfaces.generated.js';

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

/** DeviceNative's kernels (the conversions are exact host work: the hip backend takes the emulation's). */
type GpuOps = Omit<DeviceOps, 'f32ToF16' | 'f16ToF32' | 'bf16ToF16'>;

/** Each op of a surface as its host reference, ref<Op>, with the op's signature. */
type Ref<T> = { [K in keyof T & string as `ref${Capitalize<K>}`]: T[K] };

/** The kernels' host-side expected values (ld_host_ref.h): what the device check compares the GPU with. */
export type HostRef = Ref<GpuOps> & Ref<DeepseekNative> & Ref<DecodeNative> & Ref<GptOssNative> & HostRefOps;

/** The addon's GPU ops: DeviceNative's kernels, and all of DeepseekNative and DecodeNative (same signatures). */
export type HipAddon = GpuOps & DeepseekNative & DecodeNative & GptOssNative & HostRef & {
  probe(): HipProbe;
  /** load the runtime, the code object and its kernels, run the self-check; throws with what failed */
  open(codeObjectPath: string): void;
};

function buildDir(): string {
  return path.join(packageRoot(), 'device-hip', 'build', 'Release');
}

let addon: HipAddon | null | undefined;

/** The hip addon's file (part of the build, harness/runner/build.ts, with the code object it loads). */
export const hipAddonFile = (): string => path.join(buildDir(), 'ld_hip.node');

/** The ld_hip addon, or null when `npm run build:native` has not built it. */
export function loadHipAddon(): HipAddon | null {
  if (addon !== undefined) return addon;
  const file = hipAddonFile();
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
  if (typeof a.hcPreF16 !== 'function' || typeof a.attentionDecodeF16 !== 'function' || typeof a.dequantBnb4ToF16 !== 'function' || typeof a.gemmMxfp4F16 !== 'function' || typeof a.gemmFp8F16 !== 'function' || typeof a.gemmNvfp4F16 !== 'function' || typeof a.gemmBnb4F16 !== 'function') {
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
    gemmMxfp4F16: (...args) => a.gemmMxfp4F16(...args),
    gemmFp8F16: (...args) => a.gemmFp8F16(...args),
    gemmNvfp4F16: (...args) => a.gemmNvfp4F16(...args),
    gemmBnb4F16: (...args) => a.gemmBnb4F16(...args),
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
