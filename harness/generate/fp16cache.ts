/**
 * The FP16 weight cache of the optimized path (`layerdiff convert <model> --fp16-cache DIR`): the device
 * path's pre-dequantized weights as safetensors F16 tensors named like the checkpoint's weights
 * (`model.layers.3.mlp.down_proj.weight`, …), one file per layer plus embed.safetensors and
 * head.safetensors, and manifest.json binding them to the checkpoint's full fingerprint and to each file's
 * SHA-256. Writing converts one layer at a time (memory bounded by a layer); the manifest is written last,
 * after the old one is removed, so an interrupted convert leaves no usable-looking cache.
 *
 * Loading: a cache whose manifest names another checkpoint fingerprint (or tool version) is stale and is
 * not used (the caller dequantizes at load instead); a cache whose files do not match the manifest's
 * digests, or lack a tensor, is corrupt: an InputError naming the file. The file digests go through the
 * same stat-keyed cache as checkpoint fingerprints, so after the first load verifying costs a few stats.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { type FileDigest, fingerprintFiles, type FingerprintOptions } from '../gate/fingerprint.js';
import type { LlamaCheckpoint } from '../models/llama.js';
import { SafetensorsFile, type TensorToWrite, writeFileAtomic, writeSafetensors } from '../io/safetensors.js';
import { toolVersion } from '../version.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import {
  buildLlamaF16Embed, buildLlamaF16Head, buildLlamaF16Layer, LLAMA_NORM_KEYS, type LlamaF16Layer, type LlamaF16Weights,
  llamaLayerTensorName, llamaLayerTensorShape,
} from '../../device-hip/llama_decode.js';
import { LLAMA_LINEARS } from '../models/llama.js';

export const FP16_CACHE_SCHEMA = 'layerdiff.fp16-cache/1';
export const MANIFEST = 'manifest.json';

export interface Fp16Manifest {
  schema: typeof FP16_CACHE_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  architecture: 'llama';
  checkpoint: { path: string; fingerprint: string };
  num_layers: number;
  /** lm_head is the embedding (tie_word_embeddings): stored once, in embed.safetensors */
  tied_head: boolean;
  files: FileDigest[];
  created: string;
}

const LAYER_KEYS = [...LLAMA_NORM_KEYS, ...LLAMA_LINEARS] as const;
const layerFile = (L: number) => `layer.${String(L).padStart(5, '0')}.safetensors`;
const f16 = (name: string, shape: number[], data: Uint16Array): TensorToWrite => ({ name, dtype: 'F16', shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) });

export async function writeFp16Cache(m: LlamaCheckpoint, N: DeviceNative, dir: string, fingerprint: string, onFile?: (name: string) => void): Promise<Fp16Manifest> {
  if (fs.existsSync(dir) && !fs.statSync(dir).isDirectory()) throw new InputError('--fp16-cache names a file; give a folder', { file: dir });
  fs.mkdirSync(dir, { recursive: true });
  fs.rmSync(path.join(dir, MANIFEST), { force: true });
  const { vocab: V, hidden: D } = m.cfg;
  const meta = { format: 'pt', generator: 'layerdiff convert', checkpoint_fingerprint: fingerprint };
  const names: string[] = [];
  const put = (file: string, tensors: TensorToWrite[]) => {
    writeSafetensors(path.join(dir, file), tensors, meta);
    names.push(file);
    onFile?.(file);
  };
  const embed = buildLlamaF16Embed(m, N);
  put('embed.safetensors', [f16(m.embedName, [V, D], embed)]);
  for (let L = 0; L < m.cfg.layers; L++) {
    const w = buildLlamaF16Layer(m, N, L);
    put(layerFile(L), LAYER_KEYS.map((k) => f16(llamaLayerTensorName(L, k), llamaLayerTensorShape(m, k), w[k])));
  }
  const tied = m.headName === m.embedName;
  const { norm, head } = buildLlamaF16Head(m, N, embed);
  put('head.safetensors', [f16('model.norm.weight', [D], norm), ...(tied ? [] : [f16(m.headName, [V, D], head)])]);
  const digests = await fingerprintFiles(dir, names, { protect: m.ck.dir });
  const manifest: Fp16Manifest = {
    schema: FP16_CACHE_SCHEMA,
    tool: { name: 'layerdiff', version: toolVersion() },
    architecture: 'llama',
    checkpoint: { path: path.resolve(m.ck.dir), fingerprint },
    num_layers: m.cfg.layers,
    tied_head: tied,
    files: digests.files,
    created: new Date().toISOString(),
  };
  writeFileAtomic(path.join(dir, MANIFEST), JSON.stringify(manifest, null, 2) + '\n');
  return manifest;
}

export type Fp16CacheLoad = { ok: true; weights: LlamaF16Weights; manifest: Fp16Manifest } | { ok: false; why: string };

export async function loadFp16Cache(dir: string, m: LlamaCheckpoint, fingerprint: string, fpOptions: FingerprintOptions = {}): Promise<Fp16CacheLoad> {
  const mf = path.join(dir, MANIFEST);
  if (!fs.existsSync(mf)) return { ok: false, why: `${dir} holds no ${MANIFEST} (not written by layerdiff convert, or the conversion did not finish)` };
  let man: Fp16Manifest;
  try {
    man = JSON.parse(fs.readFileSync(mf, 'utf8')) as Fp16Manifest;
  } catch {
    throw new InputError('not valid JSON', { file: mf });
  }
  if (man?.schema !== FP16_CACHE_SCHEMA || !Array.isArray(man.files)) throw new InputError(`not a ${FP16_CACHE_SCHEMA} manifest`, { file: mf });
  if (man.checkpoint?.fingerprint !== fingerprint) return { ok: false, why: `the cache was converted from another checkpoint (fingerprint ${String(man.checkpoint?.fingerprint).slice(0, 19)}…, this one is ${fingerprint.slice(0, 19)}…)` };
  if (man.tool?.version !== toolVersion()) return { ok: false, why: `the cache was written by layerdiff ${man.tool?.version}, this is ${toolVersion()}` };
  if (man.num_layers !== m.cfg.layers) throw new InputError(`manifest says ${man.num_layers} layers, the checkpoint has ${m.cfg.layers}`, { file: mf });

  // Every file read below must be one the manifest vouches for, and nothing outside the folder.
  const expected = ['embed.safetensors', ...Array.from({ length: m.cfg.layers }, (_, L) => layerFile(L)), 'head.safetensors'].sort();
  const listed = man.files.map((f) => String(f?.name)).sort();
  if (listed.length !== expected.length || listed.some((n, i) => n !== expected[i])) {
    throw new InputError(`lists files ${JSON.stringify(listed)}, expected ${JSON.stringify(expected)}`, { file: mf });
  }
  const now = await fingerprintFiles(dir, man.files.map((f) => f.name), { protect: m.ck.dir, ...fpOptions });
  now.files.forEach((f, i) => {
    if (f.sha256 !== man.files[i].sha256 || f.size !== man.files[i].size) throw new InputError('does not match the digest in the FP16 cache manifest (corrupted or edited); rerun layerdiff convert', { file: path.join(dir, f.name) });
  });

  const { vocab: V, hidden: D } = m.cfg;
  /** Read tensors of one cache file, each checked to be F16 of the expected shape. */
  const fromFile = <T>(file: string, body: (get: (name: string, shape: number[]) => Uint16Array) => T): T => {
    const f = SafetensorsFile.open(path.join(dir, file));
    try {
      return body((name, shape) => {
        const info = f.get(name);
        const where = { file: path.join(dir, file), tensor: name };
        if (info === undefined) throw new InputError('tensor missing from the FP16 cache', where);
        if (info.dtype !== 'F16' || info.shape.length !== shape.length || info.shape.some((d, i) => d !== shape[i])) {
          throw new InputError(`is ${info.dtype}${JSON.stringify(info.shape)}, expected F16${JSON.stringify(shape)}`, where);
        }
        const b = f.read(info);
        return new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
      });
    } finally {
      f.close();
    }
  };
  const embed = fromFile('embed.safetensors', (get) => get(m.embedName, [V, D]));
  const layers: LlamaF16Layer[] = [];
  for (let L = 0; L < m.cfg.layers; L++) {
    layers.push(fromFile(layerFile(L), (get) => {
      const w = {} as LlamaF16Layer;
      for (const k of LAYER_KEYS) w[k] = get(llamaLayerTensorName(L, k), llamaLayerTensorShape(m, k));
      return w;
    }));
  }
  const { norm, head } = fromFile('head.safetensors', (get) => ({ norm: get('model.norm.weight', [D]), head: man.tied_head ? embed : get(m.headName, [V, D]) }));
  return { ok: true, weights: { embed, layers, norm, head }, manifest: man };
}
