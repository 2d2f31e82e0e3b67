/**
 * The typed native surfaces of the `emulated` device backend (addon `ld_device`, C++ in device-hip/src,
 * numerics in device-hip/include/ld_numerics.h). Every op, its arguments and their checks are declared once in
 * the op table (device-hip/ops/table.ts); the interfaces and validators come from it (ops/surfaces.generated.ts),
 * as do both addons' C++ readers, which throw the same TypeError/RangeError with the same message, never abort.
 * All FP16 data is f16 bits in a Uint16Array; matrices are row-major, weights [out, in].
 */
import { loadAddon, type SimdLevel } from '../harness/io/addon.js';
import { type DecodeNative, type DeepseekNative, type DeviceOps, type GptOssNative, validatedDecodeNative, validatedDeepseekNative, validatedDeviceOps, validatedGptOssNative } from './ops/surfaces.generated.js';

export type { DecodeNative, DeepseekNative, GptOssNative, HcPreResult, IndexerTopkResult, OssRouterResult, RouterResult } from './ops/surfaces.generated.js';
export { validatedDecodeNative, validatedDeepseekNative, validatedGptOssNative } from './ops/surfaces.generated.js';

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
  /** the kernel level (avx512, avx2 or scalar: which kernels run, see vbmi); every level gives the same bits */
  simd: 'avx512' | 'avx2' | 'scalar';
  /** whether the AVX-512 VBMI kernels run: the CPU has them, the level is avx512, and the last setSimd (LAYERDIFF_SIMD at load) was not 'avx512' */
  vbmi: boolean;
  openmpThreads: number;
  compiler: string;
}

/** The device's FP16 rows of one stored weight, for the weights-first check's fused pass (harness/contracts/ld_row_source.h). */
export type DeviceRowSource = { readonly __deviceRowSource: unique symbol };

/** The runner's ops (the table's `device` surface), and the addon's own functions. */
export interface DeviceNative extends DeviceOps {
  /**
   * dequantToF16's arguments → a producer of the same FP16 rows, pulled row range by row range by the reference's
   * compare (checkExactVsF16Rows). The emulation has it; the hip backend does not (its weights come off the GPU).
   */
  dequantRowSource?: (...args: Parameters<DeviceOps['dequantToF16']>) => DeviceRowSource;
  /** The same for an NVFP4 weight: dequantNvfp4ToF16's arguments → its FP16 rows. */
  nvfp4RowSource?: (...args: Parameters<DeviceOps['dequantNvfp4ToF16']>) => DeviceRowSource;
  /** The same for a bitsandbytes weight whose rows hold whole blocks of an even size: dequantBnb4ToF16's arguments. */
  bnb4RowSource?: (...args: Parameters<DeviceOps['dequantBnb4ToF16']>) => DeviceRowSource;
  info(): DeviceInfo;
  /** Test hook: force a kernel level ('avx512' without VBMI, 'avx2', 'scalar': same bits as the best), 'auto' restores the best. */
  setSimd(mode: SimdLevel): DeviceInfo['simd'];
  /** Test hook: outputs an op writes in full (table.ts `filled`) start as all-ones bytes; → the setting now. */
  setPoisonOutputs?(on: boolean): boolean;
  /** Test hook: whether an FP8 block at this f32 scale is decoded arithmetically on AVX2 (exact, else looked up). */
  fp8ArithExact?(scale: number): boolean;
}

/** DeviceNative's argument checks (TypeError/RangeError naming the shapes) around any implementation. */
export function validatedDeviceNative(raw: DeviceNative): DeviceNative {
  // the row sources take their dequantization's arguments: the same generated checks, around the row source
  const checks = validatedDeviceOps({ ...raw, dequantToF16: () => new Uint16Array(0), dequantNvfp4ToF16: () => new Uint16Array(0), dequantBnb4ToF16: () => new Uint16Array(0) });
  const rowSource = raw.dequantRowSource, nvfp4Source = raw.nvfp4RowSource, bnb4Source = raw.bnb4RowSource;
  return {
    ...validatedDeviceOps(raw),
    ...(rowSource === undefined
      ? {}
      : {
          dequantRowSource: (...args: Parameters<DeviceOps['dequantToF16']>) => {
            checks.dequantToF16(...args);
            return rowSource(...args);
          },
        }),
    ...(nvfp4Source === undefined
      ? {}
      : {
          nvfp4RowSource: (...args: Parameters<DeviceOps['dequantNvfp4ToF16']>) => {
            checks.dequantNvfp4ToF16(...args);
            return nvfp4Source(...args);
          },
        }),
    ...(bnb4Source === undefined
      ? {}
      : {
          bnb4RowSource: (...args: Parameters<DeviceOps['dequantBnb4ToF16']>) => {
            checks.dequantBnb4ToF16(...args);
            return bnb4Source(...args);
          },
        }),
    info: () => raw.info(),
    setSimd(mode) {
      if (!(['auto', 'avx512', 'avx2', 'scalar'] as const).includes(mode)) throw new RangeError(`setSimd: mode must be 'auto', 'avx512', 'avx2' or 'scalar', got ${String(mode)}`);
      return raw.setSimd(mode);
    },
    ...(raw.setPoisonOutputs === undefined ? {} : { setPoisonOutputs: (on: boolean) => raw.setPoisonOutputs!(on) }),
    ...(raw.fp8ArithExact === undefined ? {} : { fp8ArithExact: (scale: number) => raw.fp8ArithExact!(scale) }),
  };
}

let cached: DeviceNative | undefined;

/** The emulated device backend (loaded once). Throws if the addon has not been built. */
export function loadDeviceNative(): DeviceNative {
  // probed for its newest op: a build from older sources would otherwise fail only mid-run, at its first NVFP4 product
  cached ??= loadSurface<DeviceNative>('gemmBnb4F16', 'the fused NVFP4 and bitsandbytes GEMMs (gemmNvfp4F16, gemmBnb4F16)', validatedDeviceNative);
  return cached;
}

/** A surface of the emulation addon beside DeviceNative, checked for one of its functions (an older build lacks it). */
function loadSurface<T extends object>(probe: keyof T, what: string, validate: (raw: T) => T): T {
  const raw = loadAddon('ld_device') as Partial<T>;
  if (typeof raw[probe] !== 'function') throw new Error(`native addon lacks ${what}: rebuild it with npm run build:native`);
  return validate(raw as T);
}

let cachedDecode: DecodeNative | undefined;

/** The KV-cache attention of the emulated backend (device-hip/src/decode.cc), argument-checked. */
export function loadDecodeNative(): DecodeNative {
  cachedDecode ??= loadSurface<DecodeNative>('attentionDecodeF16', 'attentionDecodeF16', validatedDecodeNative);
  return cachedDecode;
}

let cachedDeepseek: DeepseekNative | undefined;

/** The DeepSeek-V4 kernels of the emulated backend (device-hip/src/deepseek_*.cc), argument-checked. */
export function loadDeepseekNative(): DeepseekNative {
  cachedDeepseek ??= loadSurface<DeepseekNative>('hcPreF16', 'the DeepSeek-V4 kernels (hcPreF16, …)', validatedDeepseekNative);
  return cachedDeepseek;
}

let cachedGptOss: GptOssNative | undefined;

/** The gpt-oss kernels of the emulated backend (device-hip/src/gpt_oss.cc), argument-checked. */
export function loadGptOssNative(): GptOssNative {
  cachedGptOss ??= loadSurface<GptOssNative>('ossRouterF32', 'the gpt-oss kernels (ossRouterF32, ossSwigluF16)', validatedGptOssNative);
  return cachedGptOss;
}
