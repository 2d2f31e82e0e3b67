/**
 * How a linear layer's weight is stored, decided by what is stored (DESIGN §3) and cross-checked with
 * quantization_config. Matrices are [out, in]; y = W·x.
 *   plain     weight BF16/F16/F32
 *   fp8-block weight F8_E4M3 + `.scale` (F8_E8M0/U8) or `.weight_scale_inv` (F32), one per block (128×128)
 *   mxfp4     weight I8/U8 [out, in/2] + `.scale` F8_E8M0/U8 [out, in/32]; low nibble = even input index
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import type { DType } from './dtypes.js';

export type LinearFormat = 'plain' | 'fp8-block' | 'mxfp4';

export interface QuantConfig {
  /** quant_method as declared, or 'none' when the config has no quantization_config */
  method: 'none' | 'fp8' | 'mxfp4';
  /** declared [out, in] block of FP8 scales */
  weightBlockSize: [number, number];
  /** the declared block description, for the report */
  declared: Record<string, unknown> | null;
}

const KNOWN_METHODS = ['fp8', 'mxfp4'] as const;

export function parseQuantConfig(config: Record<string, unknown>, configFile: string): QuantConfig {
  const q = config.quantization_config;
  if (q === undefined || q === null) return { method: 'none', weightBlockSize: [128, 128], declared: null };
  if (typeof q !== 'object' || Array.isArray(q)) throw new InputError('quantization_config is not an object', { file: configFile });
  const qc = q as Record<string, unknown>;
  const method = qc.quant_method;
  if (!(KNOWN_METHODS as readonly unknown[]).includes(method)) {
    throw new InputError(`unknown quantization_config.quant_method ${JSON.stringify(method)} (known: ${KNOWN_METHODS.join(', ')})`, { file: configFile });
  }
  if (qc.fmt !== undefined && qc.fmt !== 'e4m3') throw new InputError(`unsupported quantization_config.fmt ${JSON.stringify(qc.fmt)} (known: e4m3)`, { file: configFile });
  let block: [number, number] = [128, 128];
  if (qc.weight_block_size !== undefined) {
    const b = qc.weight_block_size;
    if (!Array.isArray(b) || b.length !== 2 || !b.every((x) => Number.isSafeInteger(x) && x > 0)) {
      throw new InputError(`quantization_config.weight_block_size must be [out, in] positive integers, got ${JSON.stringify(b)}`, { file: configFile });
    }
    block = [b[0], b[1]];
  }
  return { method: method as 'fp8' | 'mxfp4', weightBlockSize: block, declared: qc };
}

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
  out: number;
  in: number;
  weight: StoredTensor;
  scale: StoredTensor | null;
  /** rows and columns covered by one scale (mxfp4: [1, 32]; fp8: the block size) */
  block: [number, number];
}

const MX_BLOCK = 32;

function scaleNameFor(ck: Checkpoint, weightName: string): string | undefined {
  const base = weightName.replace(/\.weight$/, '');
  for (const cand of [`${base}.scale`, `${base}.weight_scale_inv`, `${base}.weight_scale`]) if (ck.has(cand)) return cand;
  return undefined;
}

function readStored(ck: Checkpoint, name: string): StoredTensor {
  const i = ck.info(name);
  return { name, dtype: i.dtype, shape: i.shape, bytes: ck.read(name), file: i.file };
}

/**
 * Describe (and with `read`, load) a linear weight. `expect` is the logical [out, in] the architecture
 * requires; a stored shape that disagrees is bad input.
 */
export function loadLinear(ck: Checkpoint, weightName: string, expect: [number, number], qc: QuantConfig, read = true): LinearWeight {
  const info = ck.info(weightName);
  const where = { file: `${ck.dir}/${ck.weightMap.get(weightName)}`, tensor: weightName };
  const [out, inn] = expect;
  const shapeIs = (s: number[], o: number, i: number) => s.length === 2 && s[0] === o && s[1] === i;
  const scaleName = scaleNameFor(ck, weightName);
  const base = { name: weightName, out, in: inn };

  if (info.dtype === 'BF16' || info.dtype === 'F16' || info.dtype === 'F32') {
    if (!shapeIs(info.shape, out, inn)) throw new InputError(`shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}]`, where);
    return { ...base, format: 'plain', weight: read ? readStored(ck, weightName) : lazy(info), scale: null, block: [1, 1] };
  }

  if (info.dtype === 'F8_E4M3') {
    if (!shapeIs(info.shape, out, inn)) throw new InputError(`shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}]`, where);
    if (scaleName === undefined) throw new InputError('F8_E4M3 weight has no scale tensor (.scale or .weight_scale_inv)', where);
    const si = ck.info(scaleName);
    const sWhere = { file: where.file, tensor: scaleName };
    if (si.dtype !== 'F8_E8M0' && si.dtype !== 'U8' && si.dtype !== 'F32') throw new InputError(`FP8 block scale must be F8_E8M0, U8 or F32, got ${si.dtype}`, sWhere);
    const [bo, bi] = qc.weightBlockSize;
    const want = [Math.ceil(out / bo), Math.ceil(inn / bi)];
    if (!shapeIs(si.shape, want[0], want[1])) {
      throw new InputError(`scale shape ${JSON.stringify(si.shape)} contradicts weight_block_size [${bo}, ${bi}] (want ${JSON.stringify(want)})`, sWhere);
    }
    return { ...base, format: 'fp8-block', weight: read ? readStored(ck, weightName) : lazy(info), scale: read ? readStored(ck, scaleName) : lazy(si), block: [bo, bi] };
  }

  if (info.dtype === 'I8' || info.dtype === 'U8') {
    if (!shapeIs(info.shape, out, inn / 2) || inn % MX_BLOCK !== 0) {
      throw new InputError(`packed FP4 shape ${JSON.stringify(info.shape)} disagrees with the config's [${out}, ${inn}] (want [${out}, ${inn / 2}])`, where);
    }
    if (scaleName === undefined) throw new InputError('packed FP4 weight has no .scale tensor', where);
    const si = ck.info(scaleName);
    const sWhere = { file: where.file, tensor: scaleName };
    if (si.dtype !== 'F8_E8M0' && si.dtype !== 'U8') throw new InputError(`MXFP4 scale must be F8_E8M0 or U8, got ${si.dtype}`, sWhere);
    if (!shapeIs(si.shape, out, inn / MX_BLOCK)) throw new InputError(`MXFP4 scale shape ${JSON.stringify(si.shape)} should be [${out}, ${inn / MX_BLOCK}]`, sWhere);
    return { ...base, format: 'mxfp4', weight: read ? readStored(ck, weightName) : lazy(info), scale: read ? readStored(ck, scaleName) : lazy(si), block: [1, MX_BLOCK] };
  }

  throw new InputError(`dtype ${info.dtype} fits no linear format (BF16/F16/F32, F8_E4M3 + scale, I8/U8 packed FP4 + scale)`, where);
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
