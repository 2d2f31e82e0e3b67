/**
 * A `--dump DIR` as a saved run (DESIGN §7): DIR/<stage>.safetensors with F32 `reference`, `device` and, in
 * isolated mode, `device_isolated`; DIR/run.json (schema layerdiff.dump/1) says whose run it is — model,
 * input, device, policy, mode. `layerdiff compare` reads dumps and golden runs through one interface.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { type FloorMetrics, isStageFloor } from '../compare/floor.js';
import type { Policy } from '../compare/policy.js';
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import type { Selections } from '../models/path.js';
import type { DeviceIdentity } from '../runner/backend.js';
import { readActs, tensorNames } from './files.js';
import { GOLDEN_MANIFEST, openGolden } from './golden.js';
import { readRegularText } from '../io/regular.js';
import { FAULT_IDS, isFaultPlan } from '../faults/plan.js';

export const DUMP_SCHEMA = 'layerdiff.dump/1';
export const DUMP_MANIFEST = 'run.json';

export interface DumpManifest {
  schema: typeof DUMP_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  model: { path: string; architecture: string; fingerprint: string; num_layers: number };
  input: { tokens: number[]; prompt?: string };
  device: DeviceIdentity;
  policy: Policy;
  mode: string;
  injected: { fault: string; layer: number | null } | null;
  stages: string[];
  /**
   * The FP16 floor the run measured per stage (the reference on its input as FP16 holds it: runner/floor), so that
   * `compare` judges the saved outputs as `diff` did; absent when the run had none (the fixed rule).
   */
  floors?: Record<string, SavedFloor>;
  /**
   * The free accumulated run's top-k flips per stage as the run judged them (stages without one left out; absent:
   * not recorded): every flipped token, the benign ones, and how many were scoring bugs.
   */
  free_flips?: Record<string, SavedFlips>;
}

export interface SavedFlips {
  tokens: number[];
  benign: number[];
  scoring_bug: number;
}

export interface SavedFloor {
  isolated: FloorMetrics | null;
  accumulated_forced: FloorMetrics | null;
}

/** One stage of a saved run: the outputs it holds (null where that side or mode was not saved). */
export interface SavedStage {
  reference: Act | null;
  device: Act | null;
  device_isolated: Act | null;
  /** the forced run (reference choices, own input), where the dump holds it as a run of its own */
  device_forced: Act | null;
  selections: Selections | null;
}

export interface SavedRun {
  dir: string;
  kind: 'dump' | 'golden';
  /** stage names in forward order */
  stages: string[];
  tokens: number[];
  prompt?: string;
  model: { path: string; architecture: string; fingerprint: string; num_layers: number } | null;
  device: DeviceIdentity | null;
  /** the fault the saved run simulated on its device (a dump of `diff --inject`), null for none or a golden run */
  injected: DumpManifest['injected'];
  /** the run's FP16 floor per stage (null: none saved, as in a golden run or a fixed-rule dump) */
  floors: Record<string, SavedFloor> | null;
  /** the mode its run ran in (diff --mode); null: not recorded */
  mode: string | null;
  /** its free accumulated run's flips per stage (harness/repro/dump.ts SavedFlips); undefined: not recorded */
  freeFlips: Record<string, SavedFlips> | undefined;
  stage(name: string): SavedStage;
}

/** A hand-edited run.json is bad input naming its field, never a crash further on. */
function checkDumpManifest(m: DumpManifest, file: string): void {
  const bad = (field: string, want: string, v: unknown): never => {
    throw new InputError(`${field} must be ${want}, got ${JSON.stringify(v)?.slice(0, 80)}`, { file });
  };
  const obj = (v: unknown) => v !== null && typeof v === 'object' && !Array.isArray(v);
  if (!obj(m.input)) bad('input', 'an object', m.input);
  if (!Array.isArray(m.input.tokens) || m.input.tokens.length === 0 || !m.input.tokens.every((t) => Number.isSafeInteger(t) && t >= 0)) bad('input.tokens', 'a non-empty list of token ids', m.input.tokens);
  if (m.input.prompt !== undefined && typeof m.input.prompt !== 'string') bad('input.prompt', 'a string', m.input.prompt);
  if (!obj(m.model)) bad('model', 'an object', m.model);
  for (const k of ['path', 'architecture', 'fingerprint'] as const) if (typeof m.model[k] !== 'string') bad(`model.${k}`, 'a string', m.model[k]);
  if (!Number.isSafeInteger(m.model.num_layers) || m.model.num_layers < 1) bad('model.num_layers', 'a positive integer', m.model.num_layers);
  if (!obj(m.device) || typeof m.device.name !== 'string' || typeof m.device.description !== 'string') bad('device', 'an object with a name and a description', m.device);
  if (!Array.isArray(m.stages) || !m.stages.every((n) => typeof n === 'string' && stageOrder([n]).length === 1)) bad('stages', 'a list of stage names', m.stages);
  if (m.injected !== undefined && m.injected !== null && !isFaultPlan(m.injected)) bad('injected', `null or { fault: one of ${FAULT_IDS.join(', ')}, layer: an index or null }`, m.injected);
  if (m.floors !== undefined) {
    if (!obj(m.floors)) bad('floors', 'an object of stage floors', m.floors);
    // every stage the run wrote has its floor: one left out would be judged by the user's number alone
    const without = m.stages.find((n) => !(n in m.floors!));
    if (without !== undefined) bad(`floors.${without}`, 'the floor of every stage the run wrote', undefined);
    for (const [name, f] of Object.entries(m.floors)) {
      // a floor of a stage the run did not write would judge nothing; a negative or missing figure is not a floor
      if (!m.stages.includes(name)) bad(`floors.${name}`, 'a stage the run wrote', name);
      if (!isStageFloor(f)) bad(`floors.${name}`, '{ isolated, accumulated_forced } each null or { max_abs, mean_abs, rms, rel_l2 } ≥ 0', f);
    }
  }
  if (m.free_flips !== undefined) {
    if (!obj(m.free_flips)) bad('free_flips', 'an object of stage flips', m.free_flips);
    const T = m.input.tokens.length;
    const ids = (v: unknown) => Array.isArray(v) && v.every((t, i) => Number.isSafeInteger(t) && t >= 0 && t < T && (i === 0 || t > (v as number[])[i - 1]));
    for (const [name, f] of Object.entries(m.free_flips)) {
      // only a layer chooses top-k sets
      if (!m.stages.includes(name) || !/^layer\.\d+$/.test(name)) bad(`free_flips.${name}`, 'a layer the run wrote', name);
      const x = f as Partial<SavedFlips> | null;
      // the tokens each once, ascending, of the input; the benign ones among them; a count of scoring bugs
      const ok = obj(x) && ids(x!.tokens) && ids(x!.benign) && x!.benign!.every((t) => x!.tokens!.includes(t)) && Number.isSafeInteger(x!.scoring_bug) && x!.scoring_bug! >= 0;
      if (!ok) bad(`free_flips.${name}`, '{ tokens, benign: ascending token indices of the input (benign among tokens), scoring_bug: a count }', f);
    }
  }
}

/** Forward order: embed, layer.0 …, final_norm, logits. */
export function stageOrder(names: string[]): string[] {
  const rank = (n: string) => (n === 'embed' ? -1 : n === 'final_norm' ? 1e9 : n === 'logits' ? 1e9 + 1 : /^layer\.(\d+)$/.test(n) ? Number(n.slice(6)) : NaN);
  return names.filter((n) => !Number.isNaN(rank(n))).sort((a, b) => rank(a) - rank(b));
}

/**
 * `--dump DIR` may name a new or empty folder, or a previous dump (its run.json of this schema, and nothing but
 * its <stage>.safetensors beside it): a dump replaces the previous one's files, and removeStaleStages takes away
 * the stages it did not write, so a folder never holds two runs. Anything else in the folder is the user's, and
 * the run refuses before computing. Returns the previous dump's stage files (empty for a new folder).
 */
export function assertDumpTarget(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  const entries = fs.readdirSync(dir).filter((f) => !f.startsWith('.layerdiff-partial-'));
  if (entries.length === 0) return [];
  const foreign = (why: string) => new InputError(`--dump: the folder is not empty and is not a previous dump (${why}); give a new or empty folder, or remove it`, { file: dir });
  if (!entries.includes(DUMP_MANIFEST)) throw foreign(`no ${DUMP_MANIFEST}`);
  let schema: unknown;
  try {
    schema = (JSON.parse(readRegularText(path.join(dir, DUMP_MANIFEST))) as { schema?: unknown } | null)?.schema;
  } catch (e) {
    if (e instanceof InputError) throw e;
    throw foreign(`${DUMP_MANIFEST} is not valid JSON`);
  }
  if (schema !== DUMP_SCHEMA) throw foreign(`${DUMP_MANIFEST} is not a ${DUMP_SCHEMA} manifest`);
  const stageFiles = entries.filter((f) => f !== DUMP_MANIFEST);
  const other = stageFiles.find((f) => !f.endsWith('.safetensors') || stageOrder([f.slice(0, -'.safetensors'.length)]).length !== 1);
  if (other !== undefined) throw foreign(`it also holds ${other}`);
  return stageFiles;
}

/** After a dump is in place: the previous dump's stage files that this run did not write. */
export function removeStaleStages(dir: string, previous: readonly string[], written: ReadonlySet<string>): void {
  for (const f of previous) if (!written.has(f)) fs.rmSync(path.join(dir, f), { force: true });
}

export function openSavedRun(dir: string, what: string): SavedRun {
  if (!fs.existsSync(dir)) throw new InputError(`${what}: no such directory`, { file: dir });
  if (!fs.statSync(dir).isDirectory()) throw new InputError(`${what}: not a directory (give a --dump folder or a golden run)`, { file: dir });
  if (fs.existsSync(path.join(dir, GOLDEN_MANIFEST))) {
    const g = openGolden(dir);
    const m = 'model' in g.manifest ? (g.manifest as { model?: SavedRun['model'] }).model ?? null : null;
    return {
      dir, kind: 'golden', stages: stageOrder(g.manifest.stages.map((s) => s.name)), tokens: g.manifest.tokens, ...(g.manifest.prompt !== undefined ? { prompt: g.manifest.prompt } : {}), model: m, device: null, injected: null, floors: null, freeFlips: undefined, mode: null,
      stage: (name) => {
        const r = g.stage(name);
        return { reference: r.out, device: null, device_isolated: null, device_forced: null, selections: r.selections };
      },
    };
  }
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
  const stages = stageOrder(files.map((f) => f.slice(0, -'.safetensors'.length)));
  if (stages.length === 0) throw new InputError(`${what}: neither a golden run (${GOLDEN_MANIFEST}) nor a --dump folder (<stage>.safetensors)`, { file: dir });
  let manifest: DumpManifest | null = null;
  const mf = path.join(dir, DUMP_MANIFEST);
  if (fs.existsSync(mf)) {
    const text = readRegularText(mf);
    try {
      manifest = JSON.parse(text) as DumpManifest;
    } catch {
      throw new InputError('not valid JSON', { file: mf });
    }
    if (manifest?.schema !== DUMP_SCHEMA) throw new InputError(`schema ${JSON.stringify((manifest as { schema?: unknown } | null)?.schema)} is not ${DUMP_SCHEMA}`, { file: mf });
    checkDumpManifest(manifest, mf);
    // the stages the run wrote are all here: a folder missing some would compare the rest and pass
    const missing = manifest.stages.filter((n) => !stages.includes(n));
    if (missing.length > 0) throw new InputError(`${DUMP_MANIFEST} lists stage${missing.length > 1 ? 's' : ''} ${missing.join(', ')} but the folder has no ${missing[0]}.safetensors`, { file: dir });
    const extra = stages.filter((n) => !manifest!.stages.includes(n));
    if (extra.length > 0) throw new InputError(`${extra[0]}.safetensors is not a stage ${DUMP_MANIFEST} lists (another run's file?)`, { file: dir });
  }
  return {
    dir, kind: 'dump', stages, tokens: manifest?.input.tokens ?? [], ...(manifest?.input.prompt !== undefined ? { prompt: manifest.input.prompt } : {}), model: manifest?.model ?? null, device: manifest?.device ?? null, injected: manifest?.injected ?? null,
    floors: manifest?.floors ?? null, freeFlips: manifest?.free_flips, mode: typeof manifest?.mode === 'string' ? manifest.mode : null,
    stage: (name) => {
      const file = path.join(dir, `${name}.safetensors`);
      const names = tensorNames(file);
      const acts = readActs(file, names.filter((n) => ['reference', 'device', 'device_isolated', 'device_forced'].includes(n)));
      return { reference: acts.get('reference') ?? null, device: acts.get('device') ?? null, device_isolated: acts.get('device_isolated') ?? null, device_forced: acts.get('device_forced') ?? null, selections: null };
    },
  };
}
