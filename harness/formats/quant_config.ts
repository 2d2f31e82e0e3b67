/**
 * quantization_config (config.json, or ModelOpt's legacy hf_quant_config.json beside it), parsed into what
 * the loader cross-checks against what is stored: the producer, and per module whether it is meant to be
 * quantized (and how) or left plain by an ignore/exclude list. What is stored decides a linear's format
 * (DESIGN §3); this says what the producer claims, so a contradiction can be named. Variants a producer
 * writes that we do not implement are refused here, by name (spec/fp4-formats.md).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { readJsonObject } from '../io/checkpoint.js';

export type QuantMethod = 'none' | 'fp8' | 'mxfp4' | 'fp4' | 'quark' | 'modelopt' | 'compressed-tensors' | 'bitsandbytes';

/** The FP4 stored forms a producer can claim for a module (registry families of harness/formats/registry.ts). */
export type DeclaredFp4 = 'mxfp4' | 'nvfp4' | 'bnb4';

export interface QuantConfig {
  /** quant_method as declared, or 'none' when the config has no quantization_config */
  method: QuantMethod;
  /** declared [out, in] block of FP8 scales */
  weightBlockSize: [number, number];
  /** the declared block description, for the report */
  declared: Record<string, unknown> | null;
  /** the file the declaration came from (config.json, or hf_quant_config.json) */
  file: string;
  /** modules left unquantized: fnmatch wildcards, `re:` regexes, or exact names (per producer) */
  ignore: ModulePattern[];
  /**
   * Quark layer_quant_config / compressed-tensors and ModelOpt config_groups: the first match decides; a group
   * whose weights are not quantized (weights null: activations only) declares its targets plain
   */
  groups: Array<{ targets: ModulePattern[]; form: DeclaredFp4 | 'plain' }>;
  /** what a targeted module not matched by a group holds (null: the producer claims nothing) */
  defaultForm: DeclaredFp4 | null;
  /** bitsandbytes: the declared code table and double quantization, checked against each quant_state */
  bnb?: { quantType: 'nf4' | 'fp4'; doubleQuant: boolean };
}

/** One ignore/target entry, with the text it came from (for messages). */
export interface ModulePattern {
  text: string;
  test: (module: string) => boolean;
  /** compressed-tensors' precedence among targets (match_targets): 0 an exact name, 1 a regex or wildcard, 2 a class name */
  rank: 0 | 1 | 2;
}

const KNOWN_METHODS: readonly string[] = ['fp8', 'mxfp4', 'fp4', 'quark', 'modelopt', 'compressed-tensors', 'bitsandbytes'];
/** Methods that exist and are refused by name (not implemented). */
const REFUSED_METHODS: Record<string, string> = {
  gptq: 'GPTQ int4 is not an FP4 format',
  awq: 'AWQ int4 is not an FP4 format',
};

/** fnmatch (Python) → a whole-name regex: `*` any run, `?` one character, `[...]` a class. */
export function fnmatchRegex(pat: string): RegExp {
  let re = '';
  for (let i = 0; i < pat.length; i++) {
    const c = pat[i];
    if (c === '*') re += '.*';
    else if (c === '?') re += '.';
    else if (c === '[') {
      const j = pat.indexOf(']', i + 1);
      if (j < 0) re += '\\[';
      else {
        let cls = pat.slice(i + 1, j);
        if (cls.startsWith('!')) cls = '^' + cls.slice(1);
        re += `[${cls.replace(/\\/g, '\\\\')}]`;
        i = j;
      }
    } else re += c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^(?:${re})$`);
}

/**
 * A producer's module pattern. `re:` regexes match from the start of the name (Python re.match, as vLLM and
 * llm-compressor apply them); otherwise `fnmatch` (Quark, ModelOpt) or an exact name (compressed-tensors;
 * a class name such as "Linear" targets every linear).
 */
export function modulePattern(text: string, plain: 'fnmatch' | 'exact', where: { file: string; field: string }): ModulePattern {
  if (text.startsWith('re:')) {
    let re: RegExp;
    try {
      re = new RegExp(`^(?:${text.slice(3)})`);
    } catch {
      throw new InputError(`${where.field}: ${JSON.stringify(text)} is not a valid regular expression`, { file: where.file });
    }
    return { text, test: (m) => re.test(m), rank: 1 };
  }
  if (text === 'Linear') return { text, test: () => true, rank: 2 };
  if (plain === 'exact') return { text, test: (m) => m === text, rank: 0 };
  const re = fnmatchRegex(text);
  return { text, test: (m) => re.test(m), rank: 1 };
}

function stringList(v: unknown, where: { file: string; field: string }): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw new InputError(`${where.field} must be a list of strings, got ${JSON.stringify(v)}`, { file: where.file });
  return v as string[];
}

function obj(v: unknown, where: { file: string; field: string }): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new InputError(`${where.field} must be an object, got ${JSON.stringify(v)}`, { file: where.file });
  return v as Record<string, unknown>;
}

export function parseQuantConfig(config: Record<string, unknown>, configFile: string): QuantConfig {
  const base = { weightBlockSize: [128, 128] as [number, number], file: configFile, ignore: [], groups: [], defaultForm: null };
  const q = config.quantization_config;
  let file = configFile;
  if (q === undefined || q === null) {
    // ModelOpt before 0.29 wrote its declaration into hf_quant_config.json, not config.json
    const legacy = path.join(path.dirname(configFile), 'hf_quant_config.json');
    if (!fs.existsSync(legacy)) return { ...base, method: 'none', declared: null };
    return parseModelOptLegacy(readJsonObject(legacy), legacy);
  }
  const qc = obj(q, { file, field: 'quantization_config' });
  const method = qc.quant_method;
  if (typeof method === 'string' && Object.hasOwn(REFUSED_METHODS, method)) throw new InputError(`quantization_config.quant_method ${JSON.stringify(method)}: ${REFUSED_METHODS[method]}`, { file });
  if (!KNOWN_METHODS.includes(method as string)) {
    throw new InputError(`unknown quantization_config.quant_method ${JSON.stringify(method)} (known: ${KNOWN_METHODS.join(', ')})`, { file });
  }
  file = configFile;
  if (method === 'quark') return parseQuark(qc, file);
  if (method === 'modelopt') return parseModelOpt(qc, file);
  if (method === 'compressed-tensors') return parseCompressedTensors(qc, file);
  if (method === 'bitsandbytes') return parseBitsAndBytes(qc, file);
  if (method === 'fp4') {
    // no producer writes this; deployment notes do: only E2M1 (the OCP element) is meaningful
    if (qc.fp4_quant_type !== undefined && qc.fp4_quant_type !== 'e2m1') {
      throw new InputError(`quantization_config.fp4_quant_type ${JSON.stringify(qc.fp4_quant_type)} is not supported (only e2m1)`, { file });
    }
    return { ...base, method: 'fp4', declared: qc };
  }
  if (qc.fmt !== undefined && qc.fmt !== 'e4m3') throw new InputError(`unsupported quantization_config.fmt ${JSON.stringify(qc.fmt)} (known: e4m3)`, { file });
  // static activation scales quantize each linear's input to FP8 with a stored input_scale: not what either path computes
  if (qc.activation_scheme !== undefined && qc.activation_scheme !== null && qc.activation_scheme !== 'dynamic') {
    throw new InputError(`quantization_config.activation_scheme ${JSON.stringify(qc.activation_scheme)} is not supported (only "dynamic": activations stay in the compute dtype)`, { file });
  }
  let block: [number, number] = [128, 128];
  if (qc.weight_block_size !== undefined) {
    const b = qc.weight_block_size;
    if (!Array.isArray(b) || b.length !== 2 || !b.every((x) => Number.isSafeInteger(x) && x > 0)) {
      throw new InputError(`quantization_config.weight_block_size must be [out, in] positive integers, got ${JSON.stringify(b)}`, { file });
    }
    block = [b[0], b[1]];
  }
  return { ...base, method: method as 'fp8' | 'mxfp4', weightBlockSize: block, declared: qc };
}

/** A Quark weight spec → the form it declares; FP6, Quark's NVFP4 (a list) and the rest are refused by name. */
function quarkForm(spec: unknown, field: string, file: string): DeclaredFp4 | null {
  if (spec === null || spec === undefined) return null;
  if (Array.isArray(spec)) {
    throw new InputError(`${field}: a list of weight specs (Quark's NVFP4, fp4 per_group 16 + fp8_e4m3 per_tensor) is not supported (only MXFP4)`, { file });
  }
  const w = obj(spec, { file, field });
  const want: Record<string, unknown> = { dtype: 'fp4', qscheme: 'per_group', group_size: 32, scale_format: 'e8m0' };
  for (const [k, v] of Object.entries(want)) {
    if (w[k] !== undefined && w[k] !== v) throw new InputError(`${field}.${k} ${JSON.stringify(w[k])} is not supported (Quark MXFP4 is dtype fp4, qscheme per_group, group_size 32, scale_format e8m0)`, { file });
  }
  if (w.dtype === undefined) throw new InputError(`${field}.dtype is missing`, { file });
  return 'mxfp4';
}

function parseQuark(qc: Record<string, unknown>, file: string): QuantConfig {
  const f = (field: string) => ({ file, field: `quantization_config.${field}` });
  const global = qc.global_quant_config === undefined ? {} : obj(qc.global_quant_config, f('global_quant_config'));
  quarkOutputs(global, 'quantization_config.global_quant_config', file);
  const defaultForm = quarkForm(global.weight, 'quantization_config.global_quant_config.weight', file);
  const groups: QuantConfig['groups'] = [];
  // per layer type (Linear, Conv2d, ...): not read here, so a form declared there could not be checked
  const byType = qc.layer_type_quant_config;
  if (byType !== undefined && byType !== null && Object.keys(obj(byType, f('layer_type_quant_config'))).length > 0) {
    throw new InputError('quantization_config.layer_type_quant_config is not supported (give per-layer specs in layer_quant_config)', { file });
  }
  const layers = qc.layer_quant_config === undefined || qc.layer_quant_config === null ? {} : obj(qc.layer_quant_config, f('layer_quant_config'));
  // the layers whose outputs export.kv_cache_group names are the FP8 KV cache (vLLM's QuarkConfig reads it there)
  const kvGroup = stringList(qc.export === undefined || qc.export === null ? undefined : obj(qc.export, f('export')).kv_cache_group, f('export.kv_cache_group'));
  for (const [pat, spec] of Object.entries(layers)) {
    if (!kvGroup.includes(pat)) quarkOutputs(obj(spec, f(`layer_quant_config.${pat}`)), `quantization_config.layer_quant_config.${pat}`, file);
    const form = quarkForm(obj(spec, f(`layer_quant_config.${pat}`)).weight, `quantization_config.layer_quant_config.${pat}.weight`, file);
    if (form !== null) groups.push({ targets: [modulePattern(pat, 'fnmatch', f('layer_quant_config'))], form });
  }
  const ignore = stringList(qc.exclude, f('exclude')).map((p) => modulePattern(p, 'fnmatch', f('exclude')));
  return { method: 'quark', weightBlockSize: [128, 128], declared: qc, file, ignore, groups, defaultForm };
}

/**
 * Quark's output_tensors quantize a linear's output: a forward pass neither path computes, refused by name, except
 * on the layers export.kv_cache_group names, whose outputs are the FP8 KV cache: a serving option, as ModelOpt's and
 * compressed-tensors' KV caches are (README, Formats). Its input_tensors (W4A4) are not refused either: on MI250,
 * which has no FP4 or FP8 matrix units, the activations of the deployed path stay FP16.
 */
function quarkOutputs(spec: Record<string, unknown>, field: string, file: string): void {
  if (spec.output_tensors !== undefined && spec.output_tensors !== null) throw new InputError(`${field}.output_tensors is not supported (quantized linear outputs, e.g. Quark's FP8 KV cache, are not computed)`, { file });
}

/** ModelOpt algorithms that exist and are refused by name (not implemented). */
const MODELOPT_REFUSED: Record<string, string> = {
  NVFP4_AWQ: 'its pre_quant_scale multiplies the input, which neither path implements',
  W4A8_AWQ: 'INT4 weights',
  W4A16_AWQ: 'INT4 weights',
  W4A8_NVFP4_FP8: 'FP8 activations',
  MIXED_PRECISION: 'per-layer quantized_layers are not implemented',
  FP8: 'ModelOpt per-tensor FP8 is not implemented',
};

function modelOptAlgo(algo: unknown, field: string, file: string): void {
  // W4A16_NVFP4 stores what NVFP4 stores, less the input_scale: the same weights
  if (algo === 'NVFP4' || algo === 'W4A16_NVFP4') return;
  if (typeof algo === 'string' && Object.hasOwn(MODELOPT_REFUSED, algo)) throw new InputError(`${field} ${JSON.stringify(algo)} is not supported: ${MODELOPT_REFUSED[algo]} (only NVFP4, W4A16_NVFP4)`, { file });
  throw new InputError(`${field} ${JSON.stringify(algo)} is not supported (only NVFP4, W4A16_NVFP4)`, { file });
}

/**
 * ModelOpt's config.json form. Its config_groups (written as compressed-tensors spells them: `weights`
 * {num_bits, type, group_size}, `targets`) say which linears hold NVFP4 and how: every group's weights must be
 * NVFP4's (4-bit float, blocks of 16), or the model is not the one this tool computes; with config_groups, a
 * linear no group targets is declared plain, as compressed-tensors reads them. ModelOpt writes one group
 * targeting "Linear"; without config_groups (older exports) every linear not ignored is NVFP4.
 */
function parseModelOpt(qc: Record<string, unknown>, file: string): QuantConfig {
  modelOptAlgo(qc.quant_algo, 'quantization_config.quant_algo', file);
  const field = { file, field: 'quantization_config.ignore' };
  const ignore = stringList(qc.ignore ?? qc.exclude_modules, field).map((p) => modulePattern(p, 'fnmatch', field));
  const groups = qc.config_groups === undefined || qc.config_groups === null ? [] : configGroups(qc.config_groups, () => 'nvfp4', file);
  return { method: 'modelopt', weightBlockSize: [128, 128], declared: qc, file, ignore, groups, defaultForm: 'nvfp4' };
}

function parseModelOptLegacy(doc: Record<string, unknown>, file: string): QuantConfig {
  const q = obj(doc.quantization, { file, field: 'quantization' });
  modelOptAlgo(q.quant_algo, 'quantization.quant_algo', file);
  if (q.group_size !== undefined && q.group_size !== 16) throw new InputError(`quantization.group_size ${JSON.stringify(q.group_size)} is not NVFP4's 16`, { file });
  const field = { file, field: 'quantization.exclude_modules' };
  const ignore = stringList(q.exclude_modules, field).map((p) => modulePattern(p, 'fnmatch', field));
  return { method: 'modelopt', weightBlockSize: [128, 128], declared: { quant_method: 'modelopt', ...q }, file, ignore, groups: [], defaultForm: 'nvfp4' };
}

const CT_FORMATS: Record<string, DeclaredFp4> = { 'nvfp4-pack-quantized': 'nvfp4', 'mxfp4-pack-quantized': 'mxfp4' };

function ctForm(format: unknown, field: string, file: string): DeclaredFp4 {
  if (typeof format === 'string' && Object.hasOwn(CT_FORMATS, format)) return CT_FORMATS[format];
  throw new InputError(`${field} ${JSON.stringify(format)} is not supported (known: ${Object.keys(CT_FORMATS).join(', ')}${field.endsWith('.format') && !field.includes('config_groups') ? ', mixed-precision' : ''})`, { file });
}

/**
 * config_groups as compressed-tensors defines them (and ModelOpt writes them): per group, the FP4 form `formOf`
 * gives it, its `weights` spec checked against that form, and its `targets` (exact names, `re:` regexes, or
 * the class name "Linear"). A group without weights (activations only) declares its targets plain.
 */
function configGroups(v: unknown, formOf: (group: Record<string, unknown>, field: string) => DeclaredFp4, file: string): QuantConfig['groups'] {
  const groups: QuantConfig['groups'] = [];
  for (const [name, g] of Object.entries(obj(v, { file, field: 'quantization_config.config_groups' }))) {
    const field = `quantization_config.config_groups.${name}`;
    const group = obj(g, { file, field });
    const form = formOf(group, field);
    const w = group.weights === undefined || group.weights === null ? null : obj(group.weights, { file, field: `${field}.weights` });
    if (w !== null) {
      const size = form === 'nvfp4' ? 16 : 32;
      if (w.num_bits !== 4) throw new InputError(`${field}.weights.num_bits ${JSON.stringify(w.num_bits)} is not 4`, { file });
      if (w.type !== undefined && w.type !== 'float') throw new InputError(`${field}.weights.type ${JSON.stringify(w.type)} is not float (FP4)`, { file });
      if (w.group_size !== undefined && w.group_size !== size) throw new InputError(`${field}.weights.group_size ${JSON.stringify(w.group_size)} disagrees with ${form}'s ${size}`, { file });
      ctWeightArgs(w, form, `${field}.weights`, file);
    }
    const targets = stringList(group.targets ?? ['Linear'], { file, field: `${field}.targets` }).map((p) => modulePattern(p, 'exact', { file, field: `${field}.targets` }));
    groups.push({ targets, form: w === null ? 'plain' : form });
  }
  return groups;
}

/**
 * The QuantizationArgs fields that change what stored FP4 weights mean (compressed-tensors' forward_helpers and
 * compressors): a zero point (symmetric false), activation-order groups (actorder, with a weight_g_idx), weights
 * quantized at run time (dynamic), a strategy other than FP4's block one. Each is refused by name: decoded
 * without them, every weight would be silently wrong.
 */
function ctWeightArgs(w: Record<string, unknown>, form: DeclaredFp4, field: string, file: string): void {
  if (w.symmetric !== undefined && w.symmetric !== null && w.symmetric !== true) throw new InputError(`${field}.symmetric ${JSON.stringify(w.symmetric)} is not supported (a zero point per block is not implemented; FP4 is symmetric)`, { file });
  // "weight" / "static" order the calibration only and store the usual format; "group" / "dynamic" (true in older
  // versions) store a weight_g_idx mapping columns to scale groups
  if (w.actorder === true || w.actorder === 'group' || w.actorder === 'dynamic') throw new InputError(`${field}.actorder ${JSON.stringify(w.actorder)} is not supported (activation-order groups, weight_g_idx, are not implemented)`, { file });
  if (w.dynamic !== undefined && w.dynamic !== null && w.dynamic !== false) throw new InputError(`${field}.dynamic ${JSON.stringify(w.dynamic)} is not supported (weights quantized at run time are not stored FP4)`, { file });
  const strategies = form === 'nvfp4' ? ['tensor_group'] : ['group', 'tensor_group'];
  if (w.strategy !== undefined && w.strategy !== null && !strategies.includes(w.strategy as string)) throw new InputError(`${field}.strategy ${JSON.stringify(w.strategy)} is not supported for ${form} (${strategies.join(' or ')})`, { file });
}

function parseCompressedTensors(qc: Record<string, unknown>, file: string): QuantConfig {
  const top = qc.format;
  const mixed = top === 'mixed-precision';
  if (!mixed) ctForm(top, 'quantization_config.format', file);
  if (qc.quantization_status !== undefined && qc.quantization_status !== 'compressed') {
    throw new InputError(`quantization_config.quantization_status ${JSON.stringify(qc.quantization_status)}: only compressed checkpoints store packed FP4`, { file });
  }
  // transforms (online Hadamard rotations of a linear's input or output) change the model the weights describe
  if (qc.transform_config !== undefined && qc.transform_config !== null) throw new InputError('quantization_config.transform_config is not supported (transforms such as online Hadamard rotations are not computed)', { file });
  const groups = configGroups(qc.config_groups ?? {}, (group, field) => ctForm(mixed ? group.format : (group.format ?? top), mixed ? `${field}.format` : 'quantization_config.format', file), file);
  const field = { file, field: 'quantization_config.ignore' };
  const ignore = stringList(qc.ignore, field).map((p) => modulePattern(p, 'exact', field));
  return { method: 'compressed-tensors', weightBlockSize: [128, 128], declared: qc, file, ignore, groups, defaultForm: null };
}

/**
 * bitsandbytes as transformers writes it (BitsAndBytesConfig.to_dict, spec/fp4-formats.md §5): 4-bit only
 * (LLM.int8 is not FP4), uint8 storage, nf4 or fp4. `llm_int8_skip_modules` keeps modules plain the way
 * transformers matches them (_replace_with_bnb_linear): a leaf name equal to the entry, a full name equal to it,
 * or one containing it followed by a dot.
 */
function parseBitsAndBytes(qc: Record<string, unknown>, file: string): QuantConfig {
  const f = (k: string) => `quantization_config.${k}`;
  const four = qc.load_in_4bit ?? qc._load_in_4bit;
  if (qc.load_in_8bit === true || qc._load_in_8bit === true) throw new InputError(`${f('load_in_8bit')} true: bitsandbytes LLM.int8 (8-bit) is not an FP4 format`, { file });
  if (four !== true) throw new InputError(`${f('load_in_4bit')} is ${JSON.stringify(four)}: only bitsandbytes 4-bit checkpoints are read`, { file });
  const t = qc.bnb_4bit_quant_type ?? 'fp4';
  if (t !== 'nf4' && t !== 'fp4') throw new InputError(`${f('bnb_4bit_quant_type')} ${JSON.stringify(t)} is not supported (known: nf4, fp4)`, { file });
  const storage = qc.bnb_4bit_quant_storage ?? 'uint8';
  if (storage !== 'uint8') throw new InputError(`${f('bnb_4bit_quant_storage')} ${JSON.stringify(storage)} is not supported (only uint8, two codes a byte)`, { file });
  const dq = qc.bnb_4bit_use_double_quant ?? false;
  if (typeof dq !== 'boolean') throw new InputError(`${f('bnb_4bit_use_double_quant')} must be a boolean, got ${JSON.stringify(dq)}`, { file });
  const field = { file, field: f('llm_int8_skip_modules') };
  // without a list transformers skips the output head itself (get_keys_to_not_convert)
  const skip = qc.llm_int8_skip_modules === undefined || qc.llm_int8_skip_modules === null ? ['lm_head'] : stringList(qc.llm_int8_skip_modules, field);
  const ignore = skip.map((key): ModulePattern => ({ text: key, test: (m) => m === key || m.includes(key + '.') || m.slice(m.lastIndexOf('.') + 1) === key, rank: 1 }));
  return { method: 'bitsandbytes', weightBlockSize: [128, 128], declared: qc, file, ignore, groups: [], defaultForm: 'bnb4', bnb: { quantType: t, doubleQuant: dq } };
}

/**
 * What the producer declares for one linear module (its name without `.weight`): 'plain' when an ignore
 * list names it, an FP4 form when a group or the global spec targets it, null when the config says
 * nothing (fp8/mxfp4/none: DeepSeek's configs declare only FP8, FP4 is recognised by what is stored).
 */
export function declaredFor(qc: QuantConfig, module: string): 'plain' | DeclaredFp4 | null {
  if (qc.method === 'none' || qc.method === 'fp8' || qc.method === 'mxfp4' || qc.method === 'fp4') return null;
  if (qc.ignore.some((p) => p.test(module))) return 'plain';
  // compressed-tensors' match_targets (config_groups, ModelOpt's too): an exact name wins over a regex, a regex over a
  // class name, whatever the groups' order (a mixed-precision "Linear" group beside a regex one); Quark's
  // layer_quant_config: the first pattern in order
  const ranked = qc.method === 'compressed-tensors' || qc.method === 'modelopt';
  for (const rank of ranked ? [0, 1, 2] : [null]) {
    for (const g of qc.groups) if (g.targets.some((p) => (rank === null || p.rank === rank) && p.test(module))) return g.form;
  }
  // no group targets it: compressed-tensors (and ModelOpt when it lists groups) leave such a module plain
  if (qc.method === 'compressed-tensors' || (qc.method === 'modelopt' && qc.groups.length > 0)) return 'plain';
  return qc.defaultForm;
}
