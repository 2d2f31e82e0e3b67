/**
 * gpt-oss generation on the device path with a K/V cache (issue 13): the layer is GptOssDevice's own pieces —
 * qkv (rmsnorm, q/k/v GEMM + bias, YaRN RoPE with the concentration) and afterAttention (o + bias, residual,
 * router, experts, combine) — with the attention over cached FP16 keys and values (kv_cache.ts), the window
 * on sliding layers and the per-head sinks passed to the same decode kernel. So its logits equal the device
 * path's full recompute bit for bit (harness/test/gpt-oss-decode.test.ts). Sliding layers keep a ring of
 * sliding_window + RING_CHUNK − 1 rows (kv_cache.ts), full layers every row. From an FP16 cache
 * (harness/generate/fp16cache_gpt_oss.ts) the linears arrive as FP16 and are not dequantized again.
 */
import { act } from '../harness/formats/tensor.js';
import type { GptOssCheckpoint, GptOssLayerWeights } from '../harness/models/gpt_oss.js';
import type { DecodeNative, DeviceNative } from './binding.js';
import type { GptOssDevice } from './gpt_oss.js';
import { type DecodeEntry, KvCacheDecoder, KvCacheF16, lastRows, RING_CHUNK } from './kv_cache.js';

export class GptOssDeviceDecoder extends KvCacheDecoder {
  readonly vocab: number;
  protected readonly cache: KvCacheF16;
  /** layer weights, read once (the experts dequantize through the device path's own cache) */
  private readonly layers: GptOssLayerWeights[] = [];

  constructor(
    private readonly m: GptOssCheckpoint,
    private readonly N: DeviceNative,
    private readonly K: DecodeNative,
    private readonly device: GptOssDevice,
    /** where the layers' weights come from: the checkpoint (dequantized on use), or an FP16 cache's layers */
    layer: (L: number) => GptOssLayerWeights = (L) => m.loadLayer(L),
    /** tokens per sliding-layer attention call (kv_cache.ts RING_CHUNK; the ring holds window + ringChunk − 1 rows) */
    ringChunk = RING_CHUNK,
  ) {
    super();
    this.vocab = m.cfg.vocab;
    // sliding layers keep a ring of window + RING_CHUNK − 1 rows, full layers every row
    this.cache = new KvCacheF16(m.cfg.layers, m.cfg.kvHeads * m.cfg.headDim, m.cfg.sliding.map((s) => (s ? m.cfg.slidingWindow : 0)), ringChunk);
    for (let L = 0; L < m.cfg.layers; L++) this.layers.push(layer(L));
  }

  protected advance(entries: DecodeEntry[]): Float32Array[] {
    const { N, K, device } = this;
    const { hidden: H, heads: NH, kvHeads: NKV, headDim: d, slidingWindow, vocab: V } = this.m.cfg;
    const rows = this.cache.rows(entries, V);
    const R = rows.tokens.length;
    // the embedding as the device path stores it (f16), rows in entry order
    let x: Uint16Array = N.f32ToF16(device.embed(rows.tokens).data);
    for (let L = 0; L < this.layers.length; L++) {
      const w = this.layers[L];
      const { q, k, v } = device.qkv(L, x, R, w, rows.rowPos);
      const o = this.cache.attend(K, L, rows, entries, q, k, v, NH, NKV, d, 1 / Math.sqrt(d), w.sliding ? slidingWindow : 0, device.sinksF32(w));
      x = device.afterAttention(L, x, o, R, w, null).out;
    }
    this.cache.commit(entries);
    // the head as the diff's device path runs it: final norm and logits on each entry's last row
    const last = act([entries.length, H], N.f16ToF32(lastRows(x, H, entries)));
    const logits = device.logits(device.finalNorm(last));
    return entries.map((_, i) => logits.data.slice(i * V, (i + 1) * V));
  }

}
