/**
 * Device backend selection. `hip` needs the HIP runtime and an AMD GPU; `emulated` runs the same kernels'
 * numerics on the CPU. Reports always say which ran: emulation is never presented as hardware.
 */
import * as os from 'node:os';
import { InputError } from '../errors.js';
import { type DeviceNative, loadDeviceNative } from '../../device-hip/binding.js';

export interface DeviceIdentity {
  name: 'hip' | 'emulated';
  /** what the numbers were computed on, in words */
  description: string;
  device_name?: string;
  arch?: string;
  versions?: Record<string, string>;
  /** target the emulation models */
  emulates?: string;
  simd?: string;
  threads?: number;
}

export interface DeviceBackend {
  identity: DeviceIdentity;
  native: DeviceNative;
}

export function selectBackend(want: string): DeviceBackend {
  if (want !== 'auto' && want !== 'hip' && want !== 'emulated') throw new InputError(`--device ${want}: expected auto, hip or emulated`);
  if (want === 'hip') {
    throw new InputError('--device hip: no HIP runtime with an AMD GPU was found on this machine (libamdhip64 not loadable); use --device emulated or --device auto');
  }
  const native = loadDeviceNative();
  const info = native.info();
  return {
    native,
    identity: {
      name: 'emulated',
      description: `CPU emulation of the MI250 (gfx90a) kernels' numerics on ${os.cpus()[0]?.model ?? os.arch()}; not GPU hardware`,
      emulates: 'AMD Instinct MI250 (CDNA2, gfx90a): FP16 storage, FP32 accumulation',
      simd: info.simd,
      threads: info.openmpThreads,
      versions: { compiler: info.compiler },
    },
  };
}
