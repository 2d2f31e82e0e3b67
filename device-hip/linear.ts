/**
 * FP16 weights for the device path: dequantized once per (layer weight, fault) and shared by the accumulated
 * and isolated runs of that layer. Keyed weakly by the bound weight, so a layer's FP16 copy dies with it.
 */
import type { LinearWeight } from '../harness/formats/linear.js';
import { type DeviceNative, FAULT_CODES } from './binding.js';
import type { FaultId } from './faults.js';

const KIND = { mxfp4: 0, 'fp8-block': 1 } as const;
const PLAIN_KIND: Record<string, number> = { BF16: 2, F16: 3, F32: 4 };

export class LinearCache {
  private readonly cache = new WeakMap<LinearWeight, Map<string, Uint16Array>>();
  constructor(private readonly N: DeviceNative) {}

  get(lw: LinearWeight, fault: FaultId | null): Uint16Array {
    const code = fault !== null && fault in FAULT_CODES ? FAULT_CODES[fault as keyof typeof FAULT_CODES] : 0;
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
    }
    return w;
  }

  /**
   * The same FP16 weights without keeping them: for weights too many to hold at once, such as a layer's
   * routed experts (DESIGN §10: 256 experts × 3 × 2048×4096 would be 12 GiB of FP16 per layer).
   */
  dequant(lw: LinearWeight, fault: FaultId | null): Uint16Array {
    const code = fault !== null && fault in FAULT_CODES ? FAULT_CODES[fault as keyof typeof FAULT_CODES] : 0;
    const kind = lw.format === 'plain' ? PLAIN_KIND[lw.weight.dtype] : KIND[lw.format];
    return this.N.dequantToF16(kind, lw.weight.bytes, lw.scale?.bytes ?? null, lw.scale?.dtype === 'F32', lw.out, lw.in, lw.block[0], lw.block[1], code);
  }
}
