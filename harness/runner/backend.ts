/**
 * Device backend selection. `hip` needs the HIP runtime and an AMD GPU (probed at run time by dlopen of
 * libamdhip64 — no link-time dependency, so machines without ROCm run unchanged); `emulated` runs the same
 * kernels' numerics on the CPU. `auto` takes `hip` only when the probe finds a device and the backend opens,
 * else `emulated` and says why in `fallback`. Reports always say which ran: emulation is never presented as
 * hardware.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { type DecodeNative, type DeepseekNative, type DeviceNative, type GptOssNative, loadDecodeNative, loadDeepseekNative, loadDeviceNative, loadGptOssNative } from '../../device-hip/binding.js';
import { hipAddonFile, type HipProbe, hipProblem, hipVersion, openHipNative, probeHip } from '../../device-hip/hip/hip_native.js';

export interface DeviceIdentity {
  /** saved: `layerdiff compare` read the device side from disk; `description` says whose run it was */
  name: 'hip' | 'emulated' | 'saved';
  /** what the numbers were computed on, in words */
  description: string;
  device_name?: string;
  arch?: string;
  versions?: Record<string, string>;
  /** target the emulation models */
  emulates?: string;
  simd?: string;
  threads?: number;
  /** --device auto only: why the hip backend was not used */
  fallback?: string;
}

/** One backend's native surfaces: every op of the device path runs on the backend the identity names. */
export interface DeviceBackend {
  identity: DeviceIdentity;
  native: DeviceNative;
  /** DeepSeek-V4's own ops (hyper-connections, compressor, indexer, sparse attention, router, MoE) */
  deepseek: DeepseekNative;
  /** the KV-cache attention of incremental decoding (generate) */
  decode: DecodeNative;
  /** gpt-oss's own ops (router, SwiGLU); null from a hip addon built before they were wired */
  gptOss: GptOssNative | null;
  /** the backend's own native files beyond the emulation's addons (hip: ld_hip.node and the code object it loaded) */
  files: readonly string[];
}

function emulated(fallback?: string): DeviceBackend {
  const native = loadDeviceNative();
  const info = native.info();
  const identity: DeviceIdentity = {
    name: 'emulated',
    description: `CPU emulation of the MI250 (gfx90a) kernels' numerics on ${os.cpus()[0]?.model ?? os.arch()}; not GPU hardware`,
    emulates: 'AMD Instinct MI250 (CDNA2, gfx90a): FP16 storage, FP32 accumulation',
    // 'avx512+vbmi' where the VBMI kernels run: LAYERDIFF_SIMD=avx512 runs AVX-512 without them (a different kernel set)
    simd: info.simd === 'avx512' && info.vbmi ? 'avx512+vbmi' : info.simd,
    threads: info.openmpThreads,
    versions: { compiler: info.compiler },
  };
  if (fallback !== undefined) identity.fallback = fallback;
  return { native, deepseek: loadDeepseekNative(), decode: loadDecodeNative(), gptOss: loadGptOssNative(), identity, files: [] };
}

function hip(p: HipProbe): DeviceBackend {
  const { native, deepseek, decode, gptOss, codeObject } = openHipNative(p);
  return {
    native,
    deepseek,
    decode,
    gptOss,
    files: [hipAddonFile(), codeObject],
    identity: {
      name: 'hip',
      description:
        `${p.deviceName} (${p.arch}) through the HIP runtime ${hipVersion(p.runtimeVersion)}: every device op runs on the GPU — ` +
        'dequantization, GEMM, RMSNorm, RoPE, attention (prefill and the decode KV cache), SwiGLU, elementwise ops, and the ' +
        "DeepSeek-V4 hyper-connection, compressor, indexer, sparse-attention, router and MoE ops; only the exact f16/bf16/f32 " +
        'format conversions run on the host',
      device_name: p.deviceName,
      arch: p.arch,
      versions: {
        hip_runtime: hipVersion(p.runtimeVersion),
        hip_driver: hipVersion(p.driverVersion),
        code_object: path.basename(codeObject),
      },
    },
  };
}

export function selectBackend(want: string): DeviceBackend {
  if (want !== 'auto' && want !== 'hip' && want !== 'emulated') throw new InputError(`--device ${want}: expected auto, hip or emulated`);
  if (want === 'emulated') return emulated();
  const probe = probeHip();
  const problem = hipProblem(probe);
  if (want === 'hip') {
    if (problem !== null) throw new InputError(`--device hip: ${problem}; use --device emulated or --device auto`);
    try {
      return hip(probe);
    } catch (e) {
      throw new InputError(`--device hip: ${(e as Error).message}; use --device emulated or --device auto`);
    }
  }
  if (problem !== null) return emulated(`hip not used: ${problem}`);
  try {
    return hip(probe);
  } catch (e) {
    return emulated(`hip not used: ${(e as Error).message}`);
  }
}
