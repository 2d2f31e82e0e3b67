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
 *
 * An independent reference's golden is read too (the committed fixtures/deepseek-v4-tiny-golden, written by
 * scripts/golden/deepseek_v4_numpy.py in float64): DIR/golden.json names its `generator`, the `tokens` and
 * the SHA-256 of each checkpoint file it was computed from (`fixture_sha256`); DIR/golden.safetensors holds
 * F32 `embed`, `layer.L`, `final_norm`, `logits` and I64 `layer.L.experts` / `layer.L.indexer` (the
 * discrete choices, sorted ascending, −1 padded). It covers every layer and has no sub-stages.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { canonicalJson, SIGNING_KEY_ENV } from '../gate/record.js';
import { outputError } from '../io/writer.js';
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import { encodeSafetensors, SafetensorsFile } from '../io/safetensors.js';
import type { LayerResult, Selections } from '../models/path.js';
import type { GoldenSink, GoldenSource } from '../runner/run.js';
import { toolVersion } from '../version.js';
import { f32Tensor, readActs, sha256, sha256File, StagedDir, tensorNames, verifyDigest } from './files.js';
import { readRegularText } from '../io/regular.js';

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
  /**
   * A gate's reference side (`gate --save-golden`): the checkpoint's content fingerprint (every file's SHA-256) and
   * the build that computed the reference, which a device shard's `--golden` must match (the record it leads to
   * says one build ran every stage); signed under LAYERDIFF_SIGNING_KEY when set, as partials are.
   */
  gate?: { fingerprint: string; build: string };
  hmac?: { alg: 'HMAC-SHA256'; value: string };
}

/** HMAC-SHA256 of a golden manifest's canonical JSON, its hmac field left out (the rule of records and partials). */
export function goldenHmac(m: GoldenManifest, key: string): string {
  const { hmac: _drop, ...body } = m;
  return createHmac('sha256', key).update(canonicalJson(body)).digest('hex');
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
    this.put(file, bytes);
    return { name, file, shape: tensors[0].shape, sha256: sha256(bytes) };
  }

  /** A full or read-only filesystem names the golden folder (exit 2), not an internal error. */
  private put(file: string, data: string | Uint8Array): void {
    try {
      fs.writeFileSync(this.out.file(file), data);
    } catch (e) {
      throw outputError(e, this.out.target, '--save-golden: cannot write');
    }
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
  commit(m: Omit<GoldenManifest, 'schema' | 'tool' | 'created' | 'input' | 'stages' | 'hmac'>, key: string | null = null): void {
    const manifest: GoldenManifest = {
      schema: GOLDEN_SCHEMA,
      tool: { name: 'layerdiff', version: toolVersion() },
      created: new Date().toISOString(),
      ...m,
      input: this.inputEntry,
      stages: this.entries,
    };
    const signed: GoldenManifest = key === null ? manifest : { ...manifest, hmac: { alg: 'HMAC-SHA256', value: goldenHmac(manifest, key) } };
    this.put(GOLDEN_MANIFEST, JSON.stringify(signed, null, 2) + '\n');
    this.out.commit();
  }

  abort(): void {
    this.out.abort();
  }
}

/** What `diff --golden` and `compare` need of a golden run, whichever wrote it. */
export interface GoldenRun extends GoldenSource {
  readonly dir: string;
  readonly manifest: Pick<GoldenManifest, 'tokens' | 'prompt' | 'layers'> & { stages: Array<{ name: string }> };
  /** refuse a golden computed from another checkpoint (`modelDir`: the checkpoint's folder, for per-file digests) */
  checkModel(fingerprint: string, architecture: string, modelDir?: string): void;
  rangeText(): string;
}

/** The golden run in DIR: layerdiff's own (--save-golden) or an independent reference's. */
export function openGolden(dir: string): GoldenRun {
  const file = path.join(dir, GOLDEN_MANIFEST);
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new InputError('--golden: no such directory', { file: dir });
  if (!fs.existsSync(file)) throw new InputError(`--golden: no ${GOLDEN_MANIFEST} here (write one with --save-golden)`, { file: dir });
  const text = readRegularText(file);
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    throw new InputError('not valid JSON', { file });
  }
  if (m !== null && typeof m === 'object' && !('schema' in m) && 'generator' in m && fs.existsSync(path.join(dir, EXTERNAL_TENSORS))) return ExternalGolden.open(dir, m as ExternalManifest);
  return GoldenReader.open(dir, m);
}

/** A hand-edited golden.json is bad input naming its field, never a crash or a read outside the folder. */
function checkGoldenFields(m: GoldenManifest, file: string): void {
  const bad = (field: string, want: string, v: unknown): never => {
    throw new InputError(`${field} must be ${want}, got ${JSON.stringify(v)?.slice(0, 80)}`, { file });
  };
  if (m.tokens.length === 0 || !m.tokens.every((t) => Number.isSafeInteger(t) && t >= 0)) bad('tokens', 'a non-empty list of token ids', m.tokens);
  if (m.prompt !== undefined && typeof m.prompt !== 'string') bad('prompt', 'a string', m.prompt);
  for (const k of ['path', 'architecture'] as const) if (typeof m.model[k] !== 'string') bad(`model.${k}`, 'a string', m.model[k]);
  const l = m.layers as unknown;
  if (l !== null && !(typeof l === 'object' && Number.isSafeInteger((l as { from?: unknown }).from) && Number.isSafeInteger((l as { to?: unknown }).to))) bad('layers', 'null or { from, to }', l);
  const entry = (e: unknown, at: string) => {
    const x = e as Partial<GoldenEntry> | null;
    if (x === null || typeof x !== 'object') bad(at, 'an object', e);
    if (typeof x!.name !== 'string') bad(`${at}.name`, 'a stage name', x!.name);
    // a file of this folder, by its own name: never a path elsewhere, a folder or the folder itself
    if (typeof x!.file !== 'string' || x!.file !== path.basename(x!.file) || x!.file === '.' || x!.file === '..' || !x!.file.endsWith('.safetensors')) bad(`${at}.file`, 'a .safetensors file name in this folder', x!.file);
    if (!Array.isArray(x!.shape) || !x!.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) bad(`${at}.shape`, 'a list of sizes', x!.shape);
    if (typeof x!.sha256 !== 'string') bad(`${at}.sha256`, 'a SHA-256 digest', x!.sha256);
    // every stage output is [tokens, …]: one row per token of the run
    if (x!.shape![0] !== m.tokens.length) bad(`${at}.shape`, `[${m.tokens.length}, …] (one row per token of tokens)`, x!.shape);
  };
  m.stages.forEach((e, i) => entry(e, `stages[${i}]`));
  if (m.input !== null && m.input !== undefined) entry(m.input, 'input');
}

export class GoldenReader implements GoldenRun {
  private constructor(
    readonly dir: string,
    readonly manifest: GoldenManifest,
  ) {}

  static open(dir: string, parsed?: unknown): GoldenReader {
    const file = path.join(dir, GOLDEN_MANIFEST);
    if (parsed === undefined) return openGolden(dir) as GoldenReader;
    const m = parsed as GoldenManifest;
    if (m === null || typeof m !== 'object' || m.schema !== GOLDEN_SCHEMA) throw new InputError(`schema ${JSON.stringify((m as { schema?: unknown } | null)?.schema)} is not ${GOLDEN_SCHEMA}`, { file });
    if (!Array.isArray(m.stages) || !Array.isArray(m.tokens) || typeof m.model?.fingerprint !== 'string') throw new InputError('manifest is missing stages, tokens or model.fingerprint', { file });
    checkGoldenFields(m, file);
    return new GoldenReader(dir, m);
  }

  /**
   * A gate's reference side, before a device shard takes it: saved by a gate (not `diff --save-golden`), of this
   * checkpoint's bytes (its content fingerprint, not only the headers `checkModel` compares), by this build, and
   * under the signing key when one is set (the rule of partials: signed with a key, unsigned without one).
   */
  checkGateSide(fingerprint: string, build: string, key: string | null): void {
    const file = path.join(this.dir, GOLDEN_MANIFEST);
    const g = this.manifest.gate;
    if (g === undefined || typeof g !== 'object' || g === null || typeof g.fingerprint !== 'string' || typeof g.build !== 'string') {
      throw new InputError('--golden: names no checkpoint content or reference build (saved by `diff --save-golden`, or by an older gate): save the reference side again with `layerdiff gate MODEL --save-golden DIR`', { file });
    }
    const h = this.manifest.hmac;
    if (key !== null || (h !== undefined && h !== null)) {
      if (h === undefined || h === null) throw new InputError(`--golden: the golden run is not signed but ${SIGNING_KEY_ENV} is set`, { file });
      if (key === null) throw new InputError(`--golden: the golden run is signed and ${SIGNING_KEY_ENV} is not set, so its signature cannot be checked`, { file });
      const want = Buffer.from(goldenHmac(this.manifest, key), 'hex');
      const got = Buffer.from(String(h.value), 'hex');
      if (h.alg !== 'HMAC-SHA256' || got.length !== want.length || !timingSafeEqual(got, want)) {
        throw new InputError('--golden: its HMAC does not match its contents under this signing key (tampered, or signed with another key)', { file });
      }
    }
    if (g.fingerprint !== fingerprint) throw new InputError(`--golden was saved from other checkpoint bytes (content ${g.fingerprint.slice(0, 19)}…; this one is ${fingerprint.slice(0, 19)}…)`, { file });
    if (g.build !== build) throw new InputError(`--golden's reference was computed by another build of layerdiff (${g.build.slice(0, 19)}…; this is ${build.slice(0, 19)}…): the record says one build ran every stage`, { file });
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

const EXTERNAL_TENSORS = 'golden.safetensors';

interface ExternalManifest {
  generator: string;
  fixture?: string;
  fixture_sha256?: Record<string, string>;
  tokens: number[];
}

/** An independent reference's golden (see the file comment): every stage of every layer, no sub-stages. */
export class ExternalGolden implements GoldenRun {
  readonly manifest: GoldenRun['manifest'];

  private constructor(
    readonly dir: string,
    private readonly m: ExternalManifest,
    private readonly names: Set<string>,
  ) {
    const stages = ['embed', ...[...names].filter((n) => /^layer\.\d+$/.test(n)).sort((a, b) => Number(a.slice(6)) - Number(b.slice(6))), 'final_norm', 'logits'].map((name) => ({ name }));
    this.manifest = { tokens: m.tokens, layers: null, stages };
  }

  static open(dir: string, m: ExternalManifest): ExternalGolden {
    const file = path.join(dir, GOLDEN_MANIFEST);
    if (!Array.isArray(m.tokens) || !m.tokens.every((t) => Number.isInteger(t) && t >= 0)) throw new InputError('"tokens" is missing or not a list of token ids', { file });
    if (m.fixture_sha256 === undefined || typeof m.fixture_sha256 !== 'object') throw new InputError('"fixture_sha256" is missing: without the checkpoint\'s digests the golden cannot be tied to a checkpoint', { file });
    const names = new Set(tensorNames(path.join(dir, EXTERNAL_TENSORS)));
    for (const need of ['embed', 'final_norm', 'logits']) if (!names.has(need)) throw new InputError(`has no tensor "${need}"`, { file: path.join(dir, EXTERNAL_TENSORS) });
    return new ExternalGolden(dir, m, names);
  }

  checkModel(_fingerprint: string, _architecture: string, modelDir?: string): void {
    // its tie to a checkpoint is the SHA-256 of each file it was computed from
    const file = path.join(this.dir, GOLDEN_MANIFEST);
    if (modelDir === undefined) throw new InputError('an independent golden run needs the model folder to check its file digests', { file });
    for (const [name, want] of Object.entries(this.m.fixture_sha256 ?? {})) {
      const f = path.join(modelDir, name);
      const got = fs.existsSync(f) ? sha256File(f) : null;
      if (got !== want) {
        throw new InputError(`--golden was computed from another checkpoint (${this.m.fixture ?? 'its fixture'}): ${name} ${got === null ? 'is missing here' : `has SHA-256 ${got.slice(0, 12)}…, the golden's is ${want.slice(0, 12)}…`}`, { file });
      }
    }
  }

  rangeText(): string {
    return 'all layers';
  }

  input(): Act {
    throw new InputError('an independent golden run covers every layer from embed; it has no mid-range input', { file: path.join(this.dir, GOLDEN_MANIFEST) });
  }

  stage(name: string): LayerResult {
    const file = path.join(this.dir, EXTERNAL_TENSORS);
    if (!this.names.has(name)) throw new InputError(`the golden run has no stage ${name}`, { file });
    const out = readActs(file, [name]).get(name)!;
    const selections: Selections = {};
    const f = SafetensorsFile.open(file);
    try {
      for (const kind of ['experts', 'indexer']) {
        const info = f.get(`${name}.${kind}`);
        if (info === undefined) continue;
        if (info.dtype !== 'I64' || info.shape.length !== 2) throw new InputError(`expected I64 [tokens, k], found ${info.dtype} [${info.shape.join(', ')}]`, { file, tensor: `${name}.${kind}` });
        const b = f.read(info);
        const v = new BigInt64Array(b.buffer, b.byteOffset, b.byteLength / 8);
        const [T, k] = info.shape;
        selections[kind] = Array.from({ length: T }, (_, t) => Array.from(v.subarray(t * k, (t + 1) * k), Number).filter((x) => x >= 0));
      }
    } finally {
      f.close();
    }
    return { out, selections: Object.keys(selections).length > 0 ? selections : null };
  }
}
