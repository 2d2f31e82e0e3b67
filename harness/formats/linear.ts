/**
 * A linear layer's stored weight, recognised through the format registry (registry.ts) from what is
 * stored (DESIGN §3) and cross-checked with quantization_config (quant_config.ts). Matrices are [out, in];
 * y = W·x. The loader resolves a module's tensors by the registry's suffixes, so a weight stored as
 * `<m>.weight_packed` (compressed-tensors) binds like any `<m>.weight`.
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { BNB_FP4_VALUES, decodeToF32, type DType, NF4_VALUES } from './dtypes.js';
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
  /** bitsandbytes' quant state (absmax itself is `scale`): its code table, block size and double quant */
  bnb?: BnbState;
}

/** A bitsandbytes 4-bit weight's quant state, validated against its tensors (spec/fp4-formats.md §5). */
export interface BnbState {
  quantType: 'nf4' | 'fp4';
  /** flat elements per absmax */
  blocksize: number;
  /** the stored quant_map [16] (what decodes the codes), and whether it equals the named table (the loader refuses
   *  any other: bitsandbytes decodes with its own; the kernels still take any table, tested so) */
  quantMap: Float32Array;
  namedTable: boolean;
  /** double quantization: absmax = nested quant_map[code] · nested absmax[⌊b/blocksize⌋] + offset */
  nested: { absmax: Float32Array; quantMap: Float32Array; offset: number; blocksize: number } | null;
  /** the dtype bitsandbytes dequantizes to (informational: this tool's paths are FP32 and FP16) */
  dtype: string;
}

/** How a linear's scale bytes decode: by the scale's dtype (an F8_E4M3 scale is NVFP4's, U8/E8M0 an MX or FP8 one). */
export function scaleCodeOf(lw: { format: LinearFormat; scale: Pick<StoredTensor, 'dtype'> | null }): ScaleCode | null {
  if (lw.scale === null) return null;
  if (lw.format === 'bnb4') return lw.scale.dtype === 'U8' ? 'u8-codes' : 'f32';
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
export function recognise(ck: Checkpoint, module: string): Recognised {
  // once per module of an open checkpoint (its tensors do not change while open): the weights check asks it three
  // times for each of a wide layer's 776 weights, ~10 % of the check's JavaScript time
  let known = recognised.get(ck);
  if (known === undefined) recognised.set(ck, (known = new Map()));
  let r = known.get(module);
  if (r === undefined) known.set(module, (r = recogniseStored(ck, module)));
  return r;
}

interface Recognised {
  readonly entry: FormatEntry;
  readonly weight: string;
  readonly scale: string | null;
  readonly global: string | null;
}

const recognised = new WeakMap<Checkpoint, Map<string, Recognised>>();

function recogniseStored(ck: Checkpoint, module: string): Recognised {
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
    if (f.marker !== undefined && !ck.has(`${module}.${f.marker}`)) {
      missing.push(`${f.id}: .${f.marker}`);
      continue;
    }
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
  if (f.layout === 'flat') return loadBnb(ck, r, base, expect, qc, read);
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

const BNB_NAMED = { nf4: NF4_VALUES, fp4: BNB_FP4_VALUES } as const;
/** the block sizes bitsandbytes' dequantize_4bit accepts */
const BNB_BLOCKSIZES: readonly number[] = [32, 64, 128, 256, 512, 1024, 2048, 4096];

/** A JSON-holding U8 tensor (bitsandbytes' quant_state), parsed; malformed bytes are bad input naming it. */
function jsonTensor(ck: Checkpoint, name: string): Record<string, unknown> {
  const where = { file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name };
  if (ck.info(name).dtype !== 'U8') throw new InputError(`quant_state dtype ${ck.info(name).dtype} is not U8 (UTF-8 JSON bytes)`, where);
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(ck.read(name)));
  } catch (e) {
    throw new InputError(`quant_state is not UTF-8 JSON (${(e as Error).message})`, where);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new InputError('quant_state JSON is not an object', where);
  return v as Record<string, unknown>;
}

function f32Tensor(ck: Checkpoint, name: string, n: number, what: string): Float32Array {
  const i = ck.info(name);
  const where = { file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name };
  if (i.dtype !== 'F32') throw new InputError(`${what} dtype ${i.dtype} is not F32`, where);
  if (i.shape.reduce((a, b) => a * b, 1) !== n || i.shape.length !== 1) throw new InputError(`${what} shape ${JSON.stringify(i.shape)} is not [${n}]`, where);
  const v = decodeToF32('F32', ck.read(name), n);
  const bad = v.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) throw new InputError(`${what} holds ${v[bad]} at [${bad}]`, where);
  return v;
}

/**
 * A bitsandbytes 4-bit linear: the flat codes, absmax, quant_map and quant_state JSON of spec §5, each
 * checked against the others and the config's [out, in]; with double quantization also the nested absmax,
 * its table and offset. Bad input names the tensor and the field.
 */
function loadBnb(ck: Checkpoint, r: ReturnType<typeof recognise>, base: Pick<LinearWeight, 'name' | 'format' | 'encoding' | 'out' | 'in'>, expect: [number, number], qc: QuantConfig, read: boolean): LinearWeight {
  const f = r.entry;
  const module = moduleOf(r.weight);
  const quantType = f.id === 'bnb-nf4' ? 'nf4' : 'fp4';
  const stateName = `${module}.${f.marker!}`;
  const at = (name: string) => ({ file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name });
  const js = jsonTensor(ck, stateName);
  const bad = (field: string, why: string): never => {
    throw new InputError(`quant_state.${field} ${why}`, at(stateName));
  };
  if (js.quant_type !== quantType) bad('quant_type', `${JSON.stringify(js.quant_type)} disagrees with the tensor's name (${quantType})`);
  if (qc.bnb !== undefined && qc.bnb.quantType !== quantType) bad('quant_type', `${quantType} disagrees with quantization_config.bnb_4bit_quant_type ${JSON.stringify(qc.bnb.quantType)}`);
  const [out, inn] = expect;
  if (!Array.isArray(js.shape) || js.shape.length !== 2 || js.shape[0] !== out || js.shape[1] !== inn) bad('shape', `${JSON.stringify(js.shape)} disagrees with the config's [${out}, ${inn}]`);
  const bs = js.blocksize;
  // bitsandbytes' dequantize_4bit takes these block sizes only (raises on any other)
  if (!BNB_BLOCKSIZES.includes(bs as number)) bad('blocksize', `${JSON.stringify(bs)} is not a block size bitsandbytes dequantizes (${BNB_BLOCKSIZES.join(', ')})`);
  const blocksize = bs as number;
  const n = out * inn;
  const nblocks = Math.ceil(n / blocksize);
  const wInfo = ck.info(r.weight);
  if (!(wInfo.shape.length === 2 && wInfo.shape[0] === Math.ceil(n / 2) && wInfo.shape[1] === 1)) {
    throw new InputError(`bitsandbytes weight shape ${JSON.stringify(wInfo.shape)} disagrees with quant_state.shape [${out}, ${inn}] (want [${Math.ceil(n / 2)}, 1]: two codes a byte over the flattened tensor)`, at(r.weight));
  }
  const aName = r.scale!;
  const aInfo = ck.info(aName);
  const nestedAbs = `${module}.weight.nested_absmax`;
  const hasNested = js.nested_blocksize !== undefined || js.nested_offset !== undefined;
  if (hasNested !== (aInfo.dtype === 'U8')) {
    throw new InputError(`absmax dtype ${aInfo.dtype} disagrees with quant_state (${hasNested ? 'double quant: U8 codes expected' : 'no double quant: F32 expected'})`, at(aName));
  }
  if (qc.bnb !== undefined && qc.bnb.doubleQuant !== hasNested) bad('nested_offset', `${hasNested ? 'present' : 'absent'} but quantization_config.bnb_4bit_use_double_quant is ${qc.bnb.doubleQuant}`);
  if (aInfo.shape.length !== 1 || aInfo.shape[0] !== nblocks) {
    throw new InputError(`absmax shape ${JSON.stringify(aInfo.shape)} is not [${nblocks}] (⌈${out}·${inn} / blocksize ${blocksize}⌉)`, at(aName));
  }
  const quantMap = f32Tensor(ck, `${module}.weight.quant_map`, 16, 'quant_map');
  const named = BNB_NAMED[quantType];
  // bitsandbytes decodes with its own table for quant_type (dequantize_4bit passes quant_type, not the stored
  // map): a stored map that differs from it describes weights bitsandbytes would not compute
  const differs = [...quantMap].findIndex((v, k) => !(Object.is(v, named[k]) || v === named[k]));
  if (differs >= 0) {
    throw new InputError(`code ${differs} is ${quantMap[differs]}, where bitsandbytes' ${quantType} table has ${named[differs]}: bitsandbytes decodes with its own table, not the stored one`, at(`${module}.weight.quant_map`));
  }
  let nested: BnbState['nested'] = null;
  if (hasNested) {
    const nbs = js.nested_blocksize;
    if (!Number.isSafeInteger(nbs) || (nbs as number) < 1) bad('nested_blocksize', `${JSON.stringify(nbs)} is not a positive block size`);
    if (typeof js.nested_offset !== 'number' || !Number.isFinite(js.nested_offset)) bad('nested_offset', `${JSON.stringify(js.nested_offset)} is not a finite number`);
    for (const t of [nestedAbs, `${module}.weight.nested_quant_map`]) if (!ck.has(t)) throw new InputError(`double-quant tensor ${t} is missing (quant_state has nested_blocksize)`, at(stateName));
    nested = {
      absmax: f32Tensor(ck, nestedAbs, Math.ceil(nblocks / (nbs as number)), 'nested_absmax'),
      quantMap: f32Tensor(ck, `${module}.weight.nested_quant_map`, 256, 'nested_quant_map'),
      offset: Math.fround(js.nested_offset as number),
      blocksize: nbs as number,
    };
  }
  const tensor = (name: string) => (read ? readStored(ck, name) : lazy(ck.info(name)));
  return {
    ...base,
    weight: tensor(r.weight),
    scale: tensor(aName),
    block: [1, blocksize],
    global: null,
    bnb: { quantType, blocksize, quantMap, namedTable: true, nested, dtype: String(js.dtype ?? 'unknown') },
  };
}

/**
 * Every stored tensor that belongs to a bound linear: its weight, scale and global scale, the entry's other
 * side tensors (bitsandbytes' quant_map, nested tables, quant_state) and the activation scales NVFP4 producers
 * record beside the weight (read by neither path: W does not depend on them). For conformance checks that
 * call any other tensor unexpected.
 */
export function linearTensorNames(ck: Checkpoint, lw: LinearWeight): string[] {
  const module = moduleOf(lw.name);
  const entry = FORMATS.find((f) => f.id === lw.encoding);
  const side = [...(entry?.extra ?? []).map((x) => x.suffix), ...(entry?.global !== null && entry?.global !== undefined ? ['input_scale', 'input_global_scale'] : [])];
  return [lw.name, ...(lw.scale !== null ? [lw.scale.name] : []), ...(lw.global ? [lw.global.tensor.name] : []), ...side.map((x) => `${module}.${x}`).filter((n) => ck.has(n))];
}

/** The logical [out, in] a stored quantized weight claims: from its quant_state (bitsandbytes), else its packed or plain shape. */
export function storedLogicalShape(ck: Checkpoint, weightName: string): [number, number] {
  const module = moduleOf(weightName);
  const r = recognise(ck, module);
  const info = ck.info(r.weight);
  if (r.entry.layout === 'flat') {
    const js = jsonTensor(ck, `${module}.${r.entry.marker!}`);
    if (!Array.isArray(js.shape) || js.shape.length !== 2 || !js.shape.every((d) => Number.isSafeInteger(d) && d > 0)) {
      throw new InputError(`quant_state.shape ${JSON.stringify(js.shape)} is not [out, in]`, { file: `${ck.dir}/${ck.weightMap.get(r.weight)}`, tensor: `${module}.${r.entry.marker!}` });
    }
    return [js.shape[0] as number, js.shape[1] as number];
  }
  return r.entry.packed ? [info.shape[0], info.shape[1] * 2] : [info.shape[0], info.shape[1]];
}

function lazy(info: { name: string; dtype: DType; shape: number[] }): StoredTensor {
  return { name: info.name, dtype: info.dtype, shape: info.shape, bytes: new Uint8Array(0) };
}

/** Read a plain (non-linear) tensor such as a norm weight as float32, checking dtype and shape. */
export function expectShape(ck: Checkpoint, name: string, shape: number[], dtypes: DType[], read = true): StoredTensor {
  const i = ck.info(name);
  const where = { file: `${ck.dir}/${ck.weightMap.get(name)}`, tensor: name };
  if (!dtypes.includes(i.dtype)) throw new InputError(`dtype ${i.dtype} not allowed here (want ${dtypes.join('/')})`, where);
  if (i.shape.length !== shape.length || i.shape.some((d, k) => d !== shape[k])) {
    throw new InputError(`shape ${JSON.stringify(i.shape)} disagrees with the config's ${JSON.stringify(shape)}`, where);
  }
  // read=false: checked only (a conformance pass), its bytes left unread
  return read ? readStored(ck, name) : { name, dtype: i.dtype, shape: i.shape, bytes: new Uint8Array(0), file: i.file };
}
