/**
 * Test helper: both Llama decoders against their full recompute on `prompts` — the device KV-cache decoder
 * bit for bit with LlamaDevice's recompute, the FP32 one within 1e-4 of LlamaReference's. Returns the device
 * and reference prefill logits for further checks.
 */
import { expect } from 'vitest';
import { loadDecodeNative, loadDeviceNative } from '../../device-hip/binding.js';
import { LlamaDevice } from '../../device-hip/llama.js';
import { buildLlamaF16, LlamaDeviceDecoder } from '../../device-hip/llama_decode.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { LlamaReferenceDecoder } from '../../reference-cpu/llama_decode.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import type { LlamaCheckpoint } from '../models/llama.js';

const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((mx, v, i) => Math.max(mx, Math.abs(v - b[i])), 0);
const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

export function expectLlamaDecodersMatchRecompute(m: LlamaCheckpoint, prompts: number[][], capacity: number): { dev: Float32Array[]; ref: Float32Array[] } {
  const N = loadDeviceNative();
  const layers = { numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L: number) => m.loadLayer(L) };
  const dev = new LlamaDeviceDecoder(m, N, loadDecodeNative(), buildLlamaF16(m, N)).prefill(prompts, capacity);
  const devFull = new RecomputeDecoder(layers, new LlamaDevice(m, N, null)).prefill(prompts, capacity);
  dev.forEach((l, i) => expect(bits(l).equals(bits(devFull[i])), `prompt ${i}: device decoder vs recompute`).toBe(true));
  const ref = new LlamaReferenceDecoder(m).prefill(prompts, capacity);
  const refFull = new RecomputeDecoder(layers, new LlamaReference(m)).prefill(prompts, capacity);
  ref.forEach((l, i) => expect(maxAbs(l, refFull[i]), `prompt ${i}: reference decoder vs recompute`).toBeLessThan(1e-4));
  return { dev, ref };
}
