/**
 * What every piece of the DeepSeek-V4 device layer needs: the native surfaces, the FP16 weight cache with
 * this layer's injected dequant fault, and the conversions of small stored tensors. One Kit per layer call.
 */
import { decodeToF32 } from '../../harness/formats/dtypes.js';
import type { LinearWeight, StoredTensor } from '../../harness/formats/linear.js';
import type { DeepseekV4Config } from '../../harness/models/deepseek_v4_config.js';
import type { DeepseekNative, DeviceNative } from '../binding.js';
import type { FaultId } from '../../harness/faults/plan.js';
import { gemmF16AccumulateF16 } from '../fault_numerics.js';
import { type LinearCache, storedToF16 } from '../linear.js';

export class Kit {
  constructor(
    readonly N: DeviceNative,
    readonly K: DeepseekNative,
    readonly cfg: DeepseekV4Config,
    private readonly linears: LinearCache,
    /** the fault injected at this layer, or null */
    readonly fault: FaultId | null,
  ) {}

  /** FP16 weights [out, in] (dequantized once per weight and fault, shared by the accumulated and isolated runs). */
  w16(lw: LinearWeight): Uint16Array {
    return this.linears.get(lw, this.fault);
  }

  /**
   * x f16 [rows, in] · Wᵀ → f16 [rows, out], FP32 accumulation (the default for every FP8/FP4/BF16 linear).
   * `transient`: dequantize for this call only (routed experts: one expert's FP16 copy alive at a time).
   */
  lin(x: Uint16Array, rows: number, lw: LinearWeight, alpha = 1, transient = false): Uint16Array {
    // fault fp16-accumulate: every FP16-output product of the layer with an FP16 running sum
    if (this.fault === 'fp16-accumulate') {
      const product = (w: Uint16Array) => gemmF16AccumulateF16(x, w, rows, lw.in, lw.out, alpha);
      return transient ? this.linears.once(lw, this.fault, product) : product(this.w16(lw));
    }
    if (transient) return this.linears.productOnce(x, rows, lw, this.fault, alpha);
    return this.linears.product(x, rows, lw, this.fault, alpha);
  }

  /**
   * x f16 [rows, in] · (rows [r0, r0 + n) of W)ᵀ → f16 [rows, n], FP32 accumulation under every fault (wo_a's
   * groups: fp16-accumulate has never touched them).
   */
  linRows(x: Uint16Array, rows: number, lw: LinearWeight, r0: number, n: number): Uint16Array {
    return this.linears.product(x, rows, lw, this.fault, 1, r0, n);
  }

  /** The same product with FP32 output: the router, the compressor projections (fp32 in DeepSeek's code). */
  lin32(x: Uint16Array, rows: number, lw: LinearWeight): Float32Array {
    return this.N.gemmF16F32(x, this.w16(lw), rows, lw.in, lw.out);
  }

  /** A stored vector or row block (norm weight, embedding/head rows) as f16: BF16 norm weights are exact in FP16 at their magnitudes. */
  vec16(t: StoredTensor): Uint16Array {
    return storedToF16(this.N, t);
  }

  /** A stored tensor as f32 (hyper-connection parameters, sinks, ape, router bias: kept in FP32). */
  f32(t: StoredTensor): Float32Array {
    return decodeToF32(t.dtype, t.bytes, t.shape.reduce((a, b) => a * b, 1));
  }

  /**
   * The same for a native call that only reads it, now: an aligned F32 tensor is its stored bytes themselves
   * (little-endian host), which may be a read's buffer that is reused once its scope ends, so the result is never
   * kept. hc_pre's mixing weights are 24 × 16,384 floats a sublayer, and decoding them element by element each call
   * cost ~1.3% of a wide decode step.
   */
  f32Now(t: StoredTensor): Float32Array {
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (t.dtype === 'F32' && t.bytes.byteOffset % 4 === 0 && t.bytes.byteLength === 4 * n) return new Float32Array(t.bytes.buffer, t.bytes.byteOffset, n);
    return this.f32(t);
  }
}
