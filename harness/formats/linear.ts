/**
 * A linear layer's stored weight, recognised through the format registry (registry.ts) from what is
 * stored (DESIGN §3) and cross-checked with quantization_config (quant_config.ts). Matrices are [out, in];
 * y = W·x. The loader resolves a module's tensors by the registry's suffixes, so a weight stored as
 * `<m>.weight_packed` (compressed-tensors) binds like any `<m>.weight`.
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { decodeToF32, type DType } from './dtypes.js';
import { type QuantConfig } from './quant_config.js';
import { type FormatEntry, type FormatId, FORMATS, type LinearFormat, type ScaleCode } from './registry.js';

export type { LinearFormat } from './registry.js';
export { parseQuantConfig, type QuantConfig } from './quant_config.js';

export interface StoredTensor {
  name: string;
  dtype: DType;
  shape: number[];
  bytes: Uint8Array;
  /** the shard it came from, for error messages */
  file?: string;
}

/** A linear layer's stored bytes, validated, shared by both paths (read once). */
export interface LinearWeight {
  /** checkpoint name of the weight tensor, e.g. model.layers.0.mlp.down_proj.weight */
  name: string;
  format: LinearFormat;
  /** the registry entry it was recognised as (absent on weights built in memory: the family's default) */
  encoding?: FormatId;
  out: number;
  in: number;
  weight: StoredTensor;
  scale: StoredTensor | null;
  /** rows and columns covered by one scale (mxfp4: [1, 32]; nvfp4: [1, 16]; fp8: the block size) */
  block: [number, number];
  /** NVFP4's per-tensor second scale, as float32: W = E2M1 · (E4M3(s) op value) */
  global?: { tensor: StoredTensor; value: number; op: 'mul' | 'div' } | null;
}

/** How a linear's scale bytes decode: by the scale's dtype (an F8_E4M3 scale is NVFP4's, U8/E8M0 an MX or FP8 one). */
export function scaleCodeOf(lw: Pick<LinearWeight, 'scale'>): ScaleCode | null {
  if (lw.scale === null) return null;
  return lw.scale.dtype === 'F32' ? 'f32' : lw.scale.dtype === 'F8_E4M3' ? 'e4m3' : 'e8m0';
}

function readStored(ck: Checkpoint, name: string): StoredTensor {
  const i = ck.info(name);
  return { name, dtype: i.dtype, shape: i.shape, bytes: ck.read(name), file: i.file };
}

/** The module a weight name belongs to: `model.layers.0.mlp.up_proj.weight` (or `.weight_packed`) → `model.layers.0.mlp.up_proj`. */
export function moduleOf(weightName: string): string {
  for (const f of FORMATS) if (weightName.endsWith('.' + f.weight.suffix)) return weightName.slice(0, -(f.weight.suffix.length + 1));
  return weightName;
}

/** The stored weight tensor of a module under any registry suffix (`.weight`, `.weight_packed`), or undefined. */
export function storedWeightName(ck: Checkpoint, module: string): string | undefined {
  for (const f of FORMATS) if (ck.has(`${module}.${f.weight.suffix}`)) return `${module}.${f.weight.suffix}`;
  return undefined;
}

/**
 * The registry entry whose stored form this module has: its weight tensor under the entry's suffix and
 * dtype and its scale tensor present with an allowed dtype. A weight that fits an entry but lacks the
 * scale or global scale the entry needs is bad input, named.
 */
export function recognise(ck: Checkpoint, module: string): { entry: FormatEntry; weight: string; scale: string | null; global: string | null } {
  const wName = storedWeightName(ck, module);
  const file = (n: string) => `${ck.dir}/${ck.weightMap.get(n)}`;
  if (wName === undefined) throw new InputError(`tensor not found (looked for ${[...new Set(FORMATS.map((f) => `${module}.${f.weight.suffix}`))].join(', ')})`, { file: ck.dir, tensor: `${module}.weight` });
  const w = ck.info(wName);
  const suffix = wName.slice(module.length + 1);
  const candidates = FORMATS.filter((f) => f.weight.suffix === suffix && f.weight.dtypes.includes(w.dtype));
  if (candidates.length === 0) {
    const fits = FORMATS.filter((f) => f.weight.suffix === suffix).map((f) => `${f.id} ${f.weight.dtypes.join('/')}`);
    throw new InputError(`dtype ${w.dtype} fits no linear format stored as .${suffix} (${fits.join('; ')})`, { file: file(wName), tensor: wName });
  }
  let missing: string[] = [];
  let wrong: { name: string; dtype: DType; entry: FormatEntry } | null = null;
  for (const f of candidates) {
    if (f.scale === null) return { entry: f, weight: wName, scale: null, global: null };
    const sName = f.scale.suffixes.map((x) => `${module}.${x}`).find((n) => ck.has(n));
    if (sName === undefined || !f.scale.dtypes.includes(ck.info(sName).dtype)) {
      if (sName !== undefined) wrong ??= { name: sName, dtype: ck.info(sName).dtype, entry: f };
      missing.push(`${f.id}: ${f.scale.suffixes.map((x) => '.' + x).join(' or ')} ${f.scale.dtypes.join('/')}`);
      continue;
    }
    if (f.global !== null && !ck.has(`${module}.${f.global.suffix}`)) {
      throw new InputError(`${f.id} weight has no global scale ${module}.${f.global.suffix} (F32 [] or [1])`, { file: file(wName), tensor: `${module}.${f.global.suffix}` });
    }
    return { entry: f, weight: wName, scale: sName, global: f.global === null ? null : `${module}.${f.global.suffix}` };
  }
  missing = [...new Set(missing)];
  if (wrong !== null) {
    const e = wrong.entry;
    throw new InputError(`scale dtype ${wrong.dtype} does not fit a ${w.dtype} weight (${e.id} wants ${e.scale!.dtypes.join('/')})`, { file: file(wrong.name), tensor: wrong.name });
  }
  throw new InputError(`${w.dtype} weight has no matching scale tensor (want ${missing.join('; ')})`, { file: file(wName), tensor: wName });
}

/**
 * Describe (and with `read`, load) a linear weight. `weightName` is the module's `.weight` name (the stored
 * tensor may carry another registry suffix); `expect` is the logical [out, in] the architecture requires:
 * a stored shape that disagrees is bad input.
 */
export function loadLinear(ck: Checkpoint, weightName: string, expect: [number, number], qc: QuantConfig, read = true): LinearWeight {
  const module = moduleOf(weightName);
  const r = recognise(ck, module);
  const f = r.entry;
  const info = ck.info(r.weight);
  const where = { file: `${ck.dir}/${ck.weightMap.get(r.weight)}`, tensor: r.weight };
  const [out, inn] = expect;
  const shapeIs = (s: number[], o: number, i: number) => s.length === 2 && s[0] === o && s[1] === i;
  const tensor = (name: string) => (read ? readStored(ck, name) : lazy(ck.info(name)));
  const base = { name: r.weight, format: f.family, encoding: f.id, out, in: inn };

  if (f.scale === null) {
    if (!shapeIs(info.shape, out, inn)) throw new InputError(`shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}]`, where);
    return { ...base, weight: tensor(r.weight), scale: null, block: [1, 1], global: null };
  }
  const block: [number, number] = f.block === 'config' ? qc.weightBlockSize : f.block;
  if (f.packed) {
    if (!shapeIs(info.shape, out, inn / 2) || inn % block[1] !== 0) {
      throw new InputError(`packed FP4 shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}] (${f.id} wants [${out}, ${inn / 2}], in a multiple of ${block[1]})`, where);
    }
  } else if (!shapeIs(info.shape, out, inn)) {
    throw new InputError(`shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}]`, where);
  }
  const si = ck.info(r.scale!);
  const sWhere = { file: `${ck.dir}/${ck.weightMap.get(r.scale!)}`, tensor: r.scale! };
  const want = [Math.ceil(out / block[0]), Math.ceil(inn / block[1])];
  if (!shapeIs(si.shape, want[0], want[1])) {
    const why = f.block === 'config' ? `weight_block_size [${block[0]}, ${block[1]}]` : `${f.id}'s block of ${block[1]}`;
    throw new InputError(`scale shape ${JSON.stringify(si.shape)} contradicts ${why} (want ${JSON.stringify(want)})`, sWhere);
  }
  return {
    ...base,
    weight: tensor(r.weight),
    scale: tensor(r.scale!),
    block,
    global: r.global === null ? null : readGlobal(ck, r.global, f.global!.op),
  };
}

/** A global scale: F32 of shape [] or [1], finite and positive (a zero divisor or a NaN is bad input). */
function readGlobal(ck: Checkpoint, name: string, op: 'mul' | 'div'): NonNullable<LinearWeight['global']> {
  const i = ck.info(name);
  const where = { file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name };
  if (i.dtype !== 'F32') throw new InputError(`global scale dtype ${i.dtype} is not F32`, where);
  if (!(i.shape.length === 0 || (i.shape.length === 1 && i.shape[0] === 1))) throw new InputError(`global scale shape ${JSON.stringify(i.shape)} is not [] or [1]`, where);
  const tensor = readStored(ck, name);
  const value = decodeToF32('F32', tensor.bytes, 1)[0];
  if (!Number.isFinite(value) || value <= 0) throw new InputError(`global scale is ${value}: it must be finite and positive`, where);
  return { tensor, value, op };
}

function lazy(info: { name: string; dtype: DType; shape: number[] }): StoredTensor {
  return { name: info.name, dtype: info.dtype, shape: info.shape, bytes: new Uint8Array(0) };
}

/** Read a plain (non-linear) tensor such as a norm weight as float32, checking dtype and shape. */
export function expectShape(ck: Checkpoint, name: string, shape: number[], dtypes: DType[]): StoredTensor {
  const i = ck.info(name);
  const where = { file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name };
  if (!dtypes.includes(i.dtype)) throw new InputError(`dtype ${i.dtype} not allowed here (want ${dtypes.join('/')})`, where);
  if (i.shape.length !== shape.length || i.shape.some((d, k) => d !== shape[k])) {
    throw new InputError(`shape ${JSON.stringify(i.shape)} disagrees with the config's ${JSON.stringify(shape)}`, where);
  }
  return readStored(ck, name);
}
