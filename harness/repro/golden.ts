/**
 * Golden runs: `--save-golden DIR` stores the reference's stage outputs, `--golden DIR` compares a later
 * device run against them without recomputing the reference (the FP32 reference of a large model costs far
 * more than the device path, and it does not change when only the device kernels do).
 *
 * DIR/golden.json — manifest (schema layerdiff.golden/1): model fingerprint, tokens, layer range, and per
 *                   stage its file, shape and SHA-256.
 * DIR/<stage>.safetensors — F32 `reference` (the stage output), `substage.<name>` (attn, mlp, …, for the
 *                   drill-down), metadata `selections` (the reference's discrete choices as JSON, which the
 *                   isolated device run takes).
 * DIR/input.safetensors — F32 `reference`: the input of the first layer when the range does not start at
 *                   embed.
 * Reading verifies each file's SHA-256 before use and holds one stage at a time. A golden made from
 * another checkpoint (fingerprint differs) is refused with exit 2.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import { encodeSafetensors, SafetensorsFile } from '../io/safetensors.js';
import type { LayerResult, Selections } from '../models/path.js';
import type { GoldenSink, GoldenSource } from '../runner/run.js';
import { toolVersion } from '../version.js';
import { f32Tensor, readActs, sha256, StagedDir, verifyDigest } from './files.js';

export const GOLDEN_SCHEMA = 'layerdiff.golden/1';
export const GOLDEN_MANIFEST = 'golden.json';

export interface GoldenEntry {
  name: string;
  file: string;
  shape: number[];
  sha256: string;
}

export interface GoldenManifest {
  schema: typeof GOLDEN_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  created: string;
  model: { path: string; architecture: string; fingerprint: string; num_layers: number };
  tokens: number[];
  prompt?: string;
  /** the saved layer range, inclusive; null = every layer */
  layers: { from: number; to: number } | null;
  input: GoldenEntry | null;
  stages: GoldenEntry[];
}

export class GoldenWriter implements GoldenSink {
  private readonly out: StagedDir;
  private readonly entries: GoldenEntry[] = [];
  private inputEntry: GoldenEntry | null = null;

  constructor(dir: string) {
    this.out = new StagedDir(dir);
  }

  private write(name: string, file: string, tensors: ReturnType<typeof f32Tensor>[], meta: Record<string, string>): GoldenEntry {
    const bytes = encodeSafetensors(tensors, { format: 'pt', ...meta });
    fs.writeFileSync(this.out.file(file), bytes);
    return { name, file, shape: tensors[0].shape, sha256: sha256(bytes) };
  }

  input(x: Act): void {
    this.inputEntry = this.write('input', 'input.safetensors', [f32Tensor('reference', x)], { stage: 'input' });
  }

  stage(name: string, r: LayerResult): void {
    const tensors = [f32Tensor('reference', r.out)];
    for (const [k, a] of Object.entries(r.substages ?? {})) tensors.push(f32Tensor(`substage.${k}`, a));
    const meta: Record<string, string> = { stage: name };
    if (r.selections !== null) meta.selections = JSON.stringify(r.selections);
    this.entries.push(this.write(name, `${name}.safetensors`, tensors, meta));
  }

  /** Write the manifest last, then move the folder into place: a golden without its manifest never appears. */
  commit(m: Omit<GoldenManifest, 'schema' | 'tool' | 'created' | 'input' | 'stages'>): void {
    const manifest: GoldenManifest = {
      schema: GOLDEN_SCHEMA,
      tool: { name: 'layerdiff', version: toolVersion() },
      created: new Date().toISOString(),
      ...m,
      input: this.inputEntry,
      stages: this.entries,
    };
    fs.writeFileSync(this.out.file(GOLDEN_MANIFEST), JSON.stringify(manifest, null, 2) + '\n');
    this.out.commit();
  }

  abort(): void {
    this.out.abort();
  }
}

export class GoldenReader implements GoldenSource {
  private constructor(
    readonly dir: string,
    readonly manifest: GoldenManifest,
  ) {}

  static open(dir: string): GoldenReader {
    const file = path.join(dir, GOLDEN_MANIFEST);
    if (!fs.existsSync(file)) throw new InputError(`--golden: no ${GOLDEN_MANIFEST} here (write one with --save-golden)`, { file: dir });
    let m: GoldenManifest;
    try {
      m = JSON.parse(fs.readFileSync(file, 'utf8')) as GoldenManifest;
    } catch {
      throw new InputError('not valid JSON', { file });
    }
    if (m === null || typeof m !== 'object' || m.schema !== GOLDEN_SCHEMA) throw new InputError(`schema ${JSON.stringify((m as { schema?: unknown } | null)?.schema)} is not ${GOLDEN_SCHEMA}`, { file });
    if (!Array.isArray(m.stages) || !Array.isArray(m.tokens) || typeof m.model?.fingerprint !== 'string') throw new InputError('manifest is missing stages, tokens or model.fingerprint', { file });
    return new GoldenReader(dir, m);
  }

  /** A golden is only valid for the checkpoint it was made from. */
  checkModel(fingerprint: string, architecture: string): void {
    const m = this.manifest.model;
    if (m.fingerprint !== fingerprint || m.architecture !== architecture) {
      throw new InputError(`--golden was saved from another checkpoint (${m.architecture} ${m.fingerprint.slice(0, 19)}… from ${m.path}; this one is ${architecture} ${fingerprint.slice(0, 19)}…)`, {
        file: path.join(this.dir, GOLDEN_MANIFEST),
      });
    }
  }

  private entry(name: string): GoldenEntry {
    const e = name === 'input' ? this.manifest.input : this.manifest.stages.find((s) => s.name === name);
    if (e == null) throw new InputError(`the golden run has no stage ${name} (saved range: ${this.rangeText()})`, { file: path.join(this.dir, GOLDEN_MANIFEST) });
    return e;
  }

  rangeText(): string {
    const l = this.manifest.layers;
    return l === null ? 'all layers' : `layers ${l.from}-${l.to}`;
  }

  private load(name: string): { acts: Map<string, Act>; selections: Selections | null } {
    const e = this.entry(name);
    const file = path.join(this.dir, e.file);
    verifyDigest(file, e.sha256, `golden stage ${name}`);
    const f = SafetensorsFile.open(file);
    const names = [...f.tensors.keys()];
    const sel = f.metadata.selections;
    f.close();
    const acts = readActs(file, names);
    let selections: Selections | null = null;
    if (sel !== undefined) {
      try {
        selections = JSON.parse(sel) as Selections;
      } catch {
        throw new InputError('metadata "selections" is not valid JSON', { file });
      }
    }
    if (!acts.has('reference')) throw new InputError('has no tensor "reference"', { file });
    return { acts, selections };
  }

  input(): Act {
    return this.load('input').acts.get('reference')!;
  }

  stage(name: string): LayerResult {
    const { acts, selections } = this.load(name);
    const substages: Record<string, Act> = {};
    for (const [k, a] of acts) if (k.startsWith('substage.')) substages[k.slice('substage.'.length)] = a;
    return { out: acts.get('reference')!, selections, ...(Object.keys(substages).length > 0 ? { substages } : {}) };
  }
}
