/**
 * Repro bundles (`diff --repro DIR`): everything needed to rerun the first failing layer on both paths,
 * anywhere, without the full checkpoint — `layerdiff replay DIR` does, and prints the same numbers.
 *
 * DIR/repro.json — manifest (schema layerdiff.repro/1): the stage, tokens, fault plan, policy, mode,
 *     --free-selection, backend, the source checkpoint's path and fingerprint, the metrics the run recorded,
 *     and the SHA-256 of every file below.
 * DIR/activations.safetensors — F32 `reference_input` (the layer's input in the reference run, which the
 *     isolated device run also takes), `device_input` (the accumulated device run's input, its own previous
 *     output; absent when that mode did not run) and `reference_output`.
 * DIR/model/ — a mini checkpoint in the real format: config.json copied byte for byte, a safetensors
 *     index, `model-layer.safetensors` with every tensor of that layer and `model-rest.safetensors` with the
 *     tensors outside the decoder layers (embedding, final norm, head: the architecture bindings open them
 *     when they bind a checkpoint), all under their original names and with their stored bytes unchanged.
 *     Other layers are absent; the bindings read layers on demand, so the layer keeps its index and the
 *     config stays the original's (no renaming, nothing rewritten). DeepSeek's mtp.* block is left out:
 *     the forward pass never reads it.
 * Tensors are copied in 64 MiB pieces, never held whole; the folder appears complete or not at all.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { FloorMetrics } from '../compare/floor.js';
import type { StageMetrics } from '../compare/metrics.js';
import type { Policy } from '../compare/policy.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { InputError } from '../errors.js';
import type { Drill, Mode, ReproCapture } from '../runner/run.js';
import { toolVersion } from '../version.js';
import { layerOf } from '../weights/check.js';
import { SafetensorsStreamWriter } from '../io/stream_writer.js';
import type { FaultPlan } from '../faults/plan.js';
import { writeSafetensors } from '../io/safetensors.js';
import { f32Tensor, sha256File, StagedDir } from './files.js';

export const REPRO_SCHEMA = 'layerdiff.repro/1';
export const REPRO_MANIFEST = 'repro.json';
export const ACTIVATIONS = 'activations.safetensors';
export const MODEL_DIR = 'model';
const LAYER_SHARD = 'model-layer.safetensors';
const REST_SHARD = 'model-rest.safetensors';
const COPY_CHUNK = 64 << 20;

export interface ReproManifest {
  schema: typeof REPRO_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  created: string;
  stage: string;
  layer: number;
  architecture: string;
  source: { path: string; fingerprint: string };
  tokens: number[];
  prompt?: string;
  injected: FaultPlan | null;
  policy: Policy;
  mode: Mode;
  free_selection: boolean;
  device: string;
  /** what the run measured for this stage; replay must print the same */
  recorded: {
    status: string;
    accumulated: StageMetrics | null;
    isolated: StageMetrics | null;
    drill: Drill | null;
    /** the stage's FP16 floor as the run measured it (its drift budget cannot be recomputed from one layer); absent: none */
    floor?: { isolated: FloorMetrics | null; accumulated_forced: FloorMetrics | null } | null;
    /**
     * The first token whose free-run choices had flipped at an earlier layer (null: none): the free run is the
     * forced run on the tokens before it (compare/forced_rows.ts). Absent in an older bundle: taken as none.
     */
    free_prefix?: number | null;
  };
  /** path relative to the bundle → SHA-256 */
  files: Record<string, string>;
  checkpoint: { dir: string; layer_tensors: string[]; other_tensors: string[] };
}

export interface BundleMeta {
  architecture: string;
  source: { path: string; fingerprint: string };
  tokens: number[];
  prompt?: string;
  injected: FaultPlan | null;
  policy: Policy;
  mode: Mode;
  freeSelection: boolean;
  device: string;
  recorded: ReproManifest['recorded'];
}

export function writeReproBundle(dir: string, ck: Checkpoint, cap: ReproCapture, meta: BundleMeta): ReproManifest {
  const out = new StagedDir(dir);
  try {
    const acts = [f32Tensor('reference_input', cap.referenceInput)];
    if (cap.deviceInput !== null) acts.push(f32Tensor('device_input', cap.deviceInput));
    acts.push(f32Tensor('reference_output', cap.referenceOutput));
    writeSafetensors(out.file(ACTIVATIONS), acts, { format: 'pt', stage: cap.stage });

    const names = ck.names().sort();
    const layerTensors = names.filter((n) => layerOf(n) === cap.layer);
    const otherTensors = names.filter((n) => layerOf(n) === null && !n.startsWith('mtp.'));
    if (layerTensors.length === 0) throw new InputError(`--repro: no tensor of layer ${cap.layer} found by name (…layers.${cap.layer}.…)`, { file: ck.dir });
    fs.copyFileSync(ck.configFile, out.file(`${MODEL_DIR}/config.json`));
    const weightMap: Record<string, string> = {};
    let total = 0;
    for (const [shard, list] of [
      [LAYER_SHARD, layerTensors],
      [REST_SHARD, otherTensors],
    ] as const) {
      if (list.length === 0) continue;
      total += copyTensors(ck, list, out.file(`${MODEL_DIR}/${shard}`), { format: 'pt', generator: 'layerdiff --repro', source: meta.source.fingerprint });
      for (const n of list) weightMap[n] = shard;
    }
    fs.writeFileSync(out.file(`${MODEL_DIR}/model.safetensors.index.json`), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2) + '\n');

    const files: Record<string, string> = {};
    const walk = (rel: string) => {
      for (const e of fs.readdirSync(path.join(out.staging, rel), { withFileTypes: true })) {
        const r = rel === '' ? e.name : `${rel}/${e.name}`;
        if (e.isDirectory()) walk(r);
        else files[r] = sha256File(path.join(out.staging, r));
      }
    };
    walk('');
    const manifest: ReproManifest = {
      schema: REPRO_SCHEMA,
      tool: { name: 'layerdiff', version: toolVersion() },
      created: new Date().toISOString(),
      stage: cap.stage,
      layer: cap.layer,
      architecture: meta.architecture,
      source: meta.source,
      tokens: meta.tokens,
      ...(meta.prompt !== undefined ? { prompt: meta.prompt } : {}),
      injected: meta.injected,
      policy: meta.policy,
      mode: meta.mode,
      free_selection: meta.freeSelection,
      device: meta.device,
      recorded: meta.recorded,
      files,
      checkpoint: { dir: MODEL_DIR, layer_tensors: layerTensors, other_tensors: otherTensors },
    };
    fs.writeFileSync(out.file(REPRO_MANIFEST), JSON.stringify(manifest, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v), 2) + '\n');
    out.commit();
    return manifest;
  } catch (e) {
    out.abort();
    throw e;
  }
}

/** Copy tensors' stored bytes into a new shard, piece by piece; returns the data bytes written. */
function copyTensors(ck: Checkpoint, names: string[], file: string, metadata: Record<string, string>): number {
  const specs = names.map((n) => {
    const i = ck.info(n);
    return { name: n, dtype: i.dtype, shape: i.shape, bytes: i.end - i.begin };
  });
  const w = SafetensorsStreamWriter.create(file, specs, metadata);
  let total = 0;
  try {
    for (const s of specs) {
      for (let off = 0; off < s.bytes; off += COPY_CHUNK) {
        const n = Math.min(COPY_CHUNK, s.bytes - off);
        w.write(s.name, ck.readRange(s.name, off, n));
      }
      total += s.bytes;
    }
    w.close();
  } catch (e) {
    w.abort();
    throw e;
  }
  return total;
}
