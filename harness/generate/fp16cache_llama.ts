/**
 * The Llama FP16 cache (fp16cache.ts): F16 tensors named like the checkpoint's weights
 * (`model.layers.3.mlp.down_proj.weight`, …), one file per layer plus embed.safetensors and head.safetensors,
 * every file vouched for by the manifest. Writing streams one layer at a time (memory bounded by a layer);
 * loading reads every weight (the Llama decoder holds them all).
 */
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { FingerprintOptions } from '../gate/fingerprint.js';
import { LLAMA_LINEARS, type LlamaCheckpoint, llamaHasBias, llamaLinearStem } from '../models/llama.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import {
  buildLlamaF16Layer, buildLlamaF16Norm, LLAMA_NORM_KEYS, type LlamaF16Layer, type LlamaF16Weights, llamaLayerTensorName, llamaLayerTensorShape,
} from '../../device-hip/llama_decode.js';
import type { TensorSpec } from '../io/stream_writer.js';
import { CacheStore, f16Bytes, type Fp16ManifestBase, layerFile, MANIFEST, openCache, writeCache, writeTableF16 } from './fp16cache.js';

export interface LlamaFp16Manifest extends Fp16ManifestBase {
  architecture: 'llama';
  /** lm_head is the embedding (tie_word_embeddings): stored once, in embed.safetensors */
  tied_head: boolean;
}

const LAYER_KEYS = [...LLAMA_NORM_KEYS, ...LLAMA_LINEARS] as const;
/** the projections whose bias the config asks for (attention_bias, mlp_bias), stored after the layer's weights */
const biasKeys = (m: LlamaCheckpoint) => LLAMA_LINEARS.filter((k) => llamaHasBias(m.cfg, k));
const EMBED = 'embed.safetensors';
const HEAD = 'head.safetensors';
const cacheFiles = (layers: number) => [EMBED, ...Array.from({ length: layers }, (_, L) => layerFile(L)), HEAD];

/**
 * Write the cache: each file streamed tensor by tensor, the embedding and an untied head in row chunks, so
 * memory holds one layer's FP16 weights at most (never the whole embedding or head).
 */
export async function writeLlamaFp16Cache(m: LlamaCheckpoint, N: DeviceNative, dir: string, fingerprint: string, onFile?: (name: string) => void, verify = false): Promise<LlamaFp16Manifest> {
  const { vocab: V, hidden: D } = m.cfg;
  const target = { dir, architecture: 'llama' as const, numLayers: m.cfg.layers, fingerprint, checkpointDir: m.ck.dir, onFile, verify };
  const f16 = (name: string, shape: number[]): TensorSpec => ({ name, dtype: 'F16', shape });
  return writeCache<LlamaFp16Manifest>(target, (files) => {
    files.stream(EMBED, [f16(m.embedName, [V, D])], (w) => writeTableF16(N, m.ck, m.embedName, V, D, w));
    for (let L = 0; L < m.cfg.layers; L++) {
      const layer = buildLlamaF16Layer(m, N, L);
      const names = LAYER_KEYS.map((k) => llamaLayerTensorName(L, k));
      const biases = biasKeys(m).map((k) => ({ name: `${llamaLinearStem(L, k)}.bias`, shape: [m.linearShapes()[k][0]], data: layer.bias[k]! }));
      files.stream(layerFile(L), [...LAYER_KEYS.map((k, i) => f16(names[i], llamaLayerTensorShape(m, k))), ...biases.map((b) => f16(b.name, b.shape))], (w) => {
        LAYER_KEYS.forEach((k, i) => w.write(names[i], f16Bytes(layer[k])));
        for (const b of biases) w.write(b.name, f16Bytes(b.data));
      });
    }
    const tied = m.headName === m.embedName;
    files.stream(HEAD, [f16('model.norm.weight', [D]), ...(tied ? [] : [f16(m.headName, [V, D])])], (w) => {
      w.write('model.norm.weight', f16Bytes(buildLlamaF16Norm(m, N)));
      if (!tied) writeTableF16(N, m.ck, m.headName, V, D, w);
    });
    return { verified: cacheFiles(m.cfg.layers), extra: { tied_head: tied } };
  });
}

/** `unchanged`: the mapped files are still the verified ones (CacheStore.unchanged); `close` releases them. */
export type LlamaFp16CacheLoad = { ok: true; weights: LlamaF16Weights; manifest: LlamaFp16Manifest; unchanged: () => void; close: () => void } | { ok: false; why: string };

export async function loadLlamaFp16Cache(dir: string, m: LlamaCheckpoint, fingerprint: string, fpOptions: FingerprintOptions = {}, listDigest?: string | null): Promise<LlamaFp16CacheLoad> {
  const want = { architecture: 'llama' as const, numLayers: m.cfg.layers, fingerprint, files: cacheFiles(m.cfg.layers), checkpointDir: m.ck.dir, listDigest };
  const c = await openCache<LlamaFp16Manifest>(dir, want, fpOptions);
  if (!c.ok) return c;
  const man = c.manifest;
  const { vocab: V, hidden: D } = m.cfg;
  // held open while the weights are used: their descriptors are what unchanged() checks
  const store = new CacheStore(dir, c.pinned);
  try {
    const embed = store.f16(EMBED, m.embedName, [V, D]);
    const layers: LlamaF16Layer[] = [];
    for (let L = 0; L < m.cfg.layers; L++) {
      const w = { bias: {} } as LlamaF16Layer;
      for (const k of LAYER_KEYS) w[k] = store.f16(layerFile(L), llamaLayerTensorName(L, k), llamaLayerTensorShape(m, k));
      for (const k of biasKeys(m)) w.bias[k] = store.f16(layerFile(L), `${llamaLinearStem(L, k)}.bias`, [m.linearShapes()[k][0]]);
      layers.push(w);
    }
    const norm = store.f16(HEAD, 'model.norm.weight', [D]);
    // tied_head is in the manifest, which no digest covers: it must agree with the checkpoint, not decide
    const tied = m.headName === m.embedName;
    if (man.tied_head !== tied) throw new InputError(`says tied_head ${String(man.tied_head)}, but the checkpoint's head is ${tied ? 'the embedding' : m.headName} (edited manifest?); rerun layerdiff convert`, { file: path.join(dir, MANIFEST) });
    const head = tied ? embed : store.f16(HEAD, m.headName, [V, D]);
    return { ok: true, weights: { embed, layers, norm, head }, manifest: man, unchanged: () => store.unchanged(), close: () => store.close() };
  } catch (e) {
    store.close();
    throw e;
  }
}
