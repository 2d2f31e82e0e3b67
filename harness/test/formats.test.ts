/**
 * The FP4 producers' formats through the registry: every element and scale code through both paths against
 * an independent decoder (written here from spec/fp4-formats.md, with @petamoriken/float16 for the FP16
 * rounding); per format, the fixture's linears recognised as that producer's form, the ignore list honoured,
 * the weights-first check exact, every applicable fault caught and named, `diff` passing; and bad input per
 * format ending in exit 2 with one line naming file, tensor or field.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { f16round, getFloat16 } from '@petamoriken/float16';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { InputError } from '../errors.js';
import { type LinearWeight, loadLinear, moduleOf, parseQuantConfig, recognise, scaleCodeOf, storedLogicalShape } from '../formats/linear.js';
import { declaredFor } from '../formats/quant_config.js';
import { faultApplies, formatEntry } from '../formats/registry.js';
import { Checkpoint } from '../io/checkpoint.js';
import { assertNoNanCodes, checkTensor, checkWeights, quantizedWeights } from '../weights/check.js';
import { contradictions } from '../cli/inspect.js';
import { dequantLinear } from '../../reference-cpu/dequant.js';
import { loadDeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';
import { FIXTURE_FORMAT_ENTRY, FIXTURE_FP4_FORMATS, type FixtureFp4Format } from '../../fixtures/fp4_producers.js';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { addTensor, dropTensor, editQuantConfig, replaceTensor } from '../../fixtures/inject.js';
import { cli, quietDiff } from './cli.js';
import { LlamaCheckpoint } from '../models/llama.js';

const N = loadDeviceNative();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-formats-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

// ---- the independent decoder (spec/fp4-formats.md) ----
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];
/** E4M3fn from its bits: bias 7, e = 0 subnormal m/8 · 2^−6, S.1111.111 NaN, no Inf. */
function e4m3(b: number): number {
  const sign = b & 0x80 ? -1 : 1;
  const e = (b >> 3) & 15;
  const m = b & 7;
  if (e === 15 && m === 7) return NaN;
  return sign * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
}
const e8m0 = (b: number) => (b === 255 ? NaN : 2 ** (b - 127));
const f16Bits = (bits: Uint16Array, k: number) => getFloat16(new DataView(bits.buffer, bits.byteOffset + 2 * k, 2), 0, true);
const sameValue = (a: number, b: number) => (Number.isNaN(a) && Number.isNaN(b)) || a === b;

/** [rows, 16] weight whose row r has scale byte r and the 16 codes in order: every (scale, code) pair once. */
function everyCodeWeight(rows: number, blockIn: 16 | 32): { packed: Uint8Array; scales: Uint8Array } {
  const bytesPerRow = blockIn / 2;
  const packed = new Uint8Array(rows * bytesPerRow);
  for (let r = 0; r < rows; r++) for (let j = 0; j < bytesPerRow; j++) packed[r * bytesPerRow + j] = ((2 * j) % 16) | (((2 * j + 1) % 16) << 4);
  return { packed, scales: Uint8Array.from({ length: rows }, (_, r) => r) };
}

function memLinear(format: 'mxfp4' | 'nvfp4', packed: Uint8Array, scales: Uint8Array, rows: number, inn: number, g: { value: number; op: 'mul' | 'div' } | null): LinearWeight {
  const global = g === null ? null : { ...g, tensor: { name: 'test.weight_scale_2', dtype: 'F32' as const, shape: [], bytes: new Uint8Array(new Float32Array([g.value]).buffer) } };
  return {
    name: 'test.weight',
    format,
    out: rows,
    in: inn,
    weight: { name: 'test.weight', dtype: 'U8', shape: [rows, inn / 2], bytes: packed },
    scale: { name: 'test.weight_scale', dtype: format === 'nvfp4' ? 'F8_E4M3' : 'U8', shape: [rows, 1], bytes: scales },
    block: [1, inn],
    global,
  };
}

describe('every element and scale code through both paths', () => {
  const globals: Array<{ value: number; op: 'mul' | 'div' }> = [
    { value: 1, op: 'mul' },
    { value: Math.fround(0.37 / 2688), op: 'mul' }, // a ModelOpt weight_scale_2: e4m3 · s2 falls below FP16's normals
    { value: Math.fround(2 ** -20), op: 'mul' },
    { value: Math.fround(2688 / 0.37), op: 'div' }, // its compressed-tensors divisor
    { value: Math.fround(3), op: 'div' }, // an inexact quotient: the scale is rounded once to float32
    { value: Math.fround(1e-3), op: 'div' }, // a large scale: E2M1 · e4m3 / g overflows FP16 for big codes
  ];
  for (const g of globals) {
    it(`NVFP4: E2M1 × every E4M3 scale code ${g.op === 'mul' ? '×' : '÷'} ${g.value}`, () => {
      const { packed, scales } = everyCodeWeight(256, 16);
      const dev = N.dequantNvfp4ToF16(packed, scales, 256, 16, g.value, g.op === 'div', 0);
      const finiteRows = [...Array(256).keys()].filter((r) => !Number.isNaN(e4m3(r)));
      const ref = dequantLinear(memLinear('nvfp4', packed.filter((_, k) => finiteRows.includes(Math.floor(k / 8))), Uint8Array.from(finiteRows), finiteRows.length, 16, g));
      let refRow = 0;
      for (let r = 0; r < 256; r++) {
        const s = Math.fround(g.op === 'mul' ? e4m3(r) * g.value : e4m3(r) / g.value);
        for (let i = 0; i < 16; i++) {
          const want = Math.fround(E2M1[i] * s);
          expect(sameValue(f16Bits(dev, r * 16 + i), f16round(want)), `device scale 0x${r.toString(16)} code ${i}`).toBe(true);
          if (!Number.isNaN(want)) expect(ref[refRow * 16 + i], `reference scale 0x${r.toString(16)} code ${i}`).toBe(want);
        }
        if (!Number.isNaN(e4m3(r))) refRow++;
      }
    });
  }

  it('MXFP4 (Quark, compressed-tensors, DeepSeek): E2M1 × every E8M0 scale code', () => {
    const { packed, scales } = everyCodeWeight(256, 32);
    const dev = N.dequantToF16(0, packed, scales, false, 256, 32, 1, 32, 0);
    // the reference keeps rows whose values float32 holds (6 · 2^126 does not): 0 … 252
    const ref = dequantLinear(memLinear('mxfp4', packed.subarray(0, 253 * 16), scales.subarray(0, 253), 253, 32, null));
    for (let r = 0; r < 256; r++) {
      for (let i = 0; i < 32; i++) {
        const want = E2M1[i % 16] * e8m0(r);
        expect(sameValue(f16Bits(dev, r * 32 + i), f16round(want)), `device scale ${r} code ${i % 16}`).toBe(true);
        if (r < 253) expect(ref[r * 32 + i], `reference scale ${r}`).toBe(Math.fround(want));
      }
    }
  });
});

const dirs = {} as Record<FixtureFp4Format, string>;
beforeAll(() => {
  for (const f of FIXTURE_FP4_FORMATS) {
    dirs[f] = path.join(tmp, f);
    writeLlamaTiny(dirs[f], { format: f });
  }
});

describe.each(FIXTURE_FP4_FORMATS.map((f) => [f]))('llama-tiny --format %s', (format) => {
  const entry = formatEntry(FIXTURE_FORMAT_ENTRY[format]);

  it('each linear is recognised by what is stored; the ignore list is honoured; nothing contradicts the config', () => {
    const ck = Checkpoint.open(dirs[format]);
    try {
      const qc = parseQuantConfig(ck.config, ck.configFile);
      const q = quantizedWeights(ck);
      expect(q.length).toBe(21); // 7 linears × layers 1–3
      for (const t of q) {
        const module = moduleOf(t.name);
        expect(recognise(ck, module).entry.id).toBe(entry.id);
        expect(declaredFor(qc, module)).toBe(entry.family);
      }
      for (const sub of ['self_attn.q_proj', 'mlp.down_proj']) {
        expect(recognise(ck, `model.layers.0.${sub}`).entry.id).toBe('plain');
        expect(declaredFor(qc, `model.layers.0.${sub}`)).toBe('plain');
      }
      expect(contradictions(ck, qc)).toEqual([]);
    } finally {
      ck.close();
    }
  });

  it('weights first: the device FP16 weights are the reference dequantization, bit for bit', () => {
    const ck = Checkpoint.open(dirs[format]);
    try {
      const w = checkWeights(ck, N, { layers: null, faults: null });
      expect(w.checked).toBe(21);
      expect(w.exact).toBe(21);
      expect(w.tensors.every((t) => t.encoding === entry.id && t.format === entry.family)).toBe(true);
    } finally {
      ck.close();
    }
  });

  it(`the weights-first check leaves each ${entry.id} weight's bytes to its fused pass, which reports every tensor as checking it read whole does, with no fault and with each fault the registry lists`, () => {
    const ck = Checkpoint.open(dirs[format]);
    try {
      const qc = parseQuantConfig(ck.config, ck.configFile);
      const cache = new LinearCache(N);
      // every weight's read is left to the caller (reserve); one that the check reads itself (fill) was not read by
      // the fused pass: with no fault (every tensor exact) none is
      const own = ck.reserve.bind(ck);
      let fills = 0;
      const reserve = vi.spyOn(ck, 'reserve').mockImplementation((name) => {
        const d = own(name);
        return { ...d, fill: () => (fills++, d.fill()) };
      });
      const q = quantizedWeights(ck).filter((t) => t.layer !== null);
      for (const fault of [null, ...entry.faults]) {
        reserve.mockClear();
        fills = 0;
        const w = checkWeights(ck, N, { layers: null, faults: fault === null ? null : { fault, layer: null } });
        expect(reserve.mock.calls.length, `${fault}`).toBe(21);
        if (fault === null) expect(fills, 'no weight read but by the fused pass').toBe(0);
        expect(w.tensors.map((t) => t.name)).toEqual(q.map((t) => t.name));
        w.tensors.forEach((t, k) => {
          const lw = loadLinear(ck, `${moduleOf(q[k].name)}.weight`, storedLogicalShape(ck, q[k].name), qc);
          expect(t, `${fault ?? 'no fault'}: ${t.name}`).toEqual(checkTensor(lw, t.layer, cache, fault));
        });
        if (fault !== null && faultApplies(fault, entry.family, scaleCodeOf(loadLinear(ck, 'model.layers.1.self_attn.k_proj.weight', [64, 192], qc)))) expect(w.mismatched, `${fault} is seen`).toBeGreaterThan(0);
      }
    } finally {
      ck.close();
    }
  });

  it(`every fault the registry lists for ${entry.id} is caught and named by the weights-first check`, () => {
    const ck = Checkpoint.open(dirs[format]);
    try {
      const qc = parseQuantConfig(ck.config, ck.configFile);
      const lw = loadLinear(ck, 'model.layers.1.self_attn.k_proj.weight', [64, 192], qc);
      const cache = new LinearCache(N);
      // a fault that cannot show in this tensor (double-quant codes where absmax is stored as F32) is a no-op there
      const [apply, noop] = [entry.faults.filter((f) => faultApplies(f, entry.family, scaleCodeOf(lw))), entry.faults.filter((f) => !faultApplies(f, entry.family, scaleCodeOf(lw)))];
      for (const fault of apply) {
        const t = checkTensor(lw, 1, cache, fault);
        expect(t.exact, fault).toBe(false);
        expect(t.matches, fault).toContain(fault);
      }
      for (const fault of noop) expect(checkTensor(lw, 1, cache, fault).exact, fault).toBe(true);
      expect(apply.length).toBeGreaterThanOrEqual(entry.family === 'bnb4' ? 3 : 5);
    } finally {
      ck.close();
    }
  });

  it('diff passes under the default policy', async () => {
    const { code, report } = await quietDiff({ model: dirs[format], layers: 'all', device: 'emulated', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, freeSelection: false });
    expect(report.verdict).not.toBe('fail');
    expect(code).toBe(0);
  });
});

describe('deepseek-v4-tiny with ModelOpt NVFP4 routed experts (fixtures/formats, committed)', () => {
  const dir = path.join(import.meta.dirname, '..', '..', 'fixtures', 'formats', 'deepseek-v4-tiny-modelopt-nvfp4');
  it('every routed expert is recognised as modelopt-nvfp4 and its device FP16 weights are the reference\'s, bit for bit', () => {
    const ck = Checkpoint.open(dir);
    try {
      const w = checkWeights(ck, N, { layers: null, faults: null, numLayers: 4 });
      const experts = w.tensors.filter((t) => /\.ffn\.experts\./.test(t.name));
      expect(experts.length).toBe(4 * 8 * 3);
      expect(experts.every((t) => t.encoding === 'modelopt-nvfp4')).toBe(true);
      expect(w.exact).toBe(w.checked);
    } finally {
      ck.close();
    }
  });
  it('diff passes under the default policy; global-scale-inverted@1 fails at layer.1 and is named from the weights', async () => {
    // the default policy (FP16 floor): at DeepSeek's real magnitudes the fixed max_abs rule fails a correct path
    const opts = { model: dir, layers: 'all', device: 'emulated', mode: 'both', freeSelection: false } as const;
    const clean = await quietDiff(opts);
    expect(clean.code).toBe(0);
    const bad = await quietDiff({ ...opts, inject: 'global-scale-inverted@1' });
    expect(bad.code).toBe(1);
    expect(bad.report.diagnosis[0].cause).toBe('global-scale-inverted');
    expect(bad.report.diagnosis[0].stage).toBe('layer.1');
  });
});

describe('the classic NVFP4 bug end to end', () => {
  it('diff --inject global-scale-inverted on compressed-tensors NVFP4 fails and the diagnosis names it', async () => {
    const { code, report } = await quietDiff({
      model: dirs['ct-nvfp4'], layers: 'all', device: 'emulated', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, freeSelection: false, inject: 'global-scale-inverted',
    });
    expect(code).toBe(1);
    expect(report.diagnosis[0].cause).toBe('global-scale-inverted');
    expect(report.diagnosis[0].stage).toBe('layer.1');
  });
});

describe('bad input per format: exit 2, one line naming file, tensor and field', () => {
  const M = 'model.layers.2.mlp.up_proj';
  const cases: Array<{ id: string; src: FixtureFp4Format; make: (src: string, dst: string) => { file?: string; tensor?: string }; says: RegExp; cmd?: string[] }> = [
    { id: 'ModelOpt global scale missing', src: 'modelopt-nvfp4', make: (s, d) => dropTensor(s, d, `${M}.weight_scale_2`), says: /no global scale .*weight_scale_2/ },
    { id: 'compressed-tensors global scale missing', src: 'ct-nvfp4', make: (s, d) => dropTensor(s, d, `${M}.weight_global_scale`), says: /no global scale .*weight_global_scale/ },
    {
      id: 'a zero divisor',
      src: 'ct-nvfp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight_global_scale`, (t) => ({ ...t, data: new Uint8Array(4) })),
      says: /global scale is 0: it must be finite and positive/,
    },
    {
      id: 'a global scale of shape [2]',
      src: 'modelopt-nvfp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight_scale_2`, (t) => ({ ...t, shape: [2], data: new Uint8Array(8) })),
      says: /global scale shape \[2\] is not \[\] or \[1\]/,
    },
    {
      id: 'an E4M3 NaN scale code',
      src: 'modelopt-nvfp4',
      make: (s, d) =>
        replaceTensor(s, d, `${M}.weight_scale`, (t) => {
          const data = new Uint8Array(t.data);
          data[5] = 0x7f;
          return { ...t, data };
        }),
      says: /E4M3 NaN scale code/,
      cmd: ['inspect', '--check'],
    },
    {
      id: 'an NVFP4 scale stored as E8M0 bytes',
      src: 'ct-nvfp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight_scale`, (t) => ({ ...t, dtype: 'F8_E8M0' })),
      says: /scale shape \[384,12\] contradicts ct-mxfp4's block of 32/,
    },
    {
      id: 'a Quark spec naming FP6',
      src: 'quark-mxfp4',
      make: (s, d) => editQuantConfig(s, d, (qc) => ((qc.global_quant_config as Record<string, Record<string, unknown>>).weight.dtype = 'fp6_e3m2')),
      says: /quantization_config\.global_quant_config\.weight\.dtype "fp6_e3m2" is not supported/,
    },
    {
      id: "Quark's NVFP4 (a list of specs)",
      src: 'quark-mxfp4',
      make: (s, d) => editQuantConfig(s, d, (qc) => (qc.layer_quant_config = { '*down_proj': { weight: [{ dtype: 'fp4', group_size: 16 }, { dtype: 'fp8_e4m3' }] } })),
      says: /layer_quant_config\.\*down_proj\.weight: a list of weight specs/,
    },
    { id: 'ModelOpt NVFP4_AWQ', src: 'modelopt-nvfp4', make: (s, d) => editQuantConfig(s, d, (qc) => (qc.quant_algo = 'NVFP4_AWQ')), says: /quant_algo "NVFP4_AWQ" is not supported: its pre_quant_scale/ },
    { id: 'ModelOpt W4A8', src: 'modelopt-nvfp4', make: (s, d) => editQuantConfig(s, d, (qc) => (qc.quant_algo = 'W4A8_AWQ')), says: /quant_algo "W4A8_AWQ" is not supported/ },
    {
      id: 'ModelOpt config_groups declaring blocks of 32',
      src: 'modelopt-nvfp4',
      make: (s, d) => editQuantConfig(s, d, (qc) => ((qc.config_groups as Record<string, Record<string, Record<string, unknown>>>).group_0.weights.group_size = 32)),
      says: /quantization_config\.config_groups\.group_0\.weights\.group_size 32 disagrees with nvfp4's 16/,
    },
    {
      id: 'ModelOpt config_groups declaring 8-bit weights',
      src: 'modelopt-nvfp4',
      make: (s, d) => editQuantConfig(s, d, (qc) => ((qc.config_groups as Record<string, Record<string, Record<string, unknown>>>).group_0.weights.num_bits = 8)),
      says: /quantization_config\.config_groups\.group_0\.weights\.num_bits 8 is not 4/,
    },
    { id: 'a compressed-tensors format not implemented', src: 'ct-mxfp4', make: (s, d) => editQuantConfig(s, d, (qc) => (qc.format = 'pack-quantized')), says: /quantization_config\.format "pack-quantized" is not supported/ },
    { id: 'bitsandbytes LLM.int8, refused by name', src: 'bnb-nf4', make: (s, d) => editQuantConfig(s, d, (qc) => ((qc.load_in_8bit = true), (qc.load_in_4bit = false))), says: /load_in_8bit true: bitsandbytes LLM\.int8 \(8-bit\) is not an FP4 format/ },
    {
      id: 'a malformed bitsandbytes quant_state JSON',
      src: 'bnb-nf4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.quant_state.bitsandbytes__nf4`, (t) => ({ ...t, shape: [20], data: t.data.subarray(0, 20) })),
      says: /quant_state is not UTF-8 JSON/,
    },
    {
      id: 'a quant_state whose shape disagrees with the tensor',
      src: 'bnb-fp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.quant_state.bitsandbytes__fp4`, (t) => {
        const data = new TextEncoder().encode(new TextDecoder().decode(t.data).replace('[384, 192]', '[192, 384]'));
        return { ...t, shape: [data.length], data };
      }),
      says: /quant_state\.shape \[192,384\] disagrees with the config's \[384, 192\]/,
    },
    {
      id: 'a bitsandbytes absmax of the wrong length',
      src: 'bnb-fp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.absmax`, (t) => ({ ...t, shape: [t.shape[0] - 1], data: t.data.subarray(0, t.data.length - 4) })),
      says: /absmax shape \[1151\] is not \[1152\]/,
    },
    { id: 'a double-quant absmax without its nested table', src: 'bnb-nf4', make: (s, d) => dropTensor(s, d, `${M}.weight.nested_quant_map`), says: /double-quant tensor .*nested_quant_map is missing/ },
    {
      id: 'a non-finite bitsandbytes quant_map value',
      src: 'bnb-fp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.quant_map`, (t) => ({ ...t, data: Uint8Array.from([...t.data.subarray(0, 4), 0, 0, 0xc0, 0x7f, ...t.data.subarray(8)]) })),
      says: /quant_map holds NaN at \[1\]/,
    },
    // from a read-only review against the producers' code: fields that change what the stored FP4 means
    ...(['symmetric', 'actorder', 'dynamic', 'strategy'] as const).map((k) => ({
      id: `compressed-tensors weights.${k} that changes the weights`,
      src: 'ct-nvfp4' as const,
      make: (s: string, d: string) => editQuantConfig(s, d, (qc) => {
        const w = (qc.config_groups as Record<string, Record<string, Record<string, unknown>>>).group_0.weights;
        w[k] = { symmetric: false, actorder: 'group', dynamic: true, strategy: 'channel' }[k];
      }),
      says: new RegExp(`quantization_config\\.config_groups\\.group_0\\.weights\\.${k} .* is not supported`),
    })),
    { id: 'compressed-tensors online transforms', src: 'ct-nvfp4', make: (s, d) => editQuantConfig(s, d, (qc) => (qc.transform_config = { config_groups: { u: { type: 'hadamard', apply: [{ location: 'input', targets: ['Linear'] }] } } })), says: /quantization_config\.transform_config is not supported/ },
    {
      id: "Quark's quantized outputs (an FP8 KV cache)",
      src: 'quark-mxfp4',
      make: (s, d) => editQuantConfig(s, d, (qc) => (qc.layer_quant_config = { '*k_proj': { output_tensors: { dtype: 'fp8_e4m3', qscheme: 'per_tensor' } } })),
      says: /quantization_config\.layer_quant_config\.\*k_proj\.output_tensors is not supported/,
    },
    { id: "Quark's layer_type_quant_config", src: 'quark-mxfp4', make: (s, d) => editQuantConfig(s, d, (qc) => (qc.layer_type_quant_config = { Linear: { weight: { dtype: 'fp6_e3m2' } } })), says: /quantization_config\.layer_type_quant_config is not supported/ },
    {
      id: 'a bitsandbytes quant_map other than its named table (bitsandbytes decodes with its own)',
      src: 'bnb-nf4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.quant_map`, (t) => ({ ...t, data: new Uint8Array(Float32Array.from(new Float32Array(t.data.slice().buffer), (v) => v * 2).buffer) })),
      says: /code 0 is -2, where bitsandbytes' nf4 table has -1: bitsandbytes decodes with its own table/,
    },
    {
      id: 'a bitsandbytes block size bitsandbytes does not dequantize',
      src: 'bnb-fp4',
      make: (s, d) => replaceTensor(s, d, `${M}.weight.quant_state.bitsandbytes__fp4`, (t) => {
        const data = new TextEncoder().encode(new TextDecoder().decode(t.data).replace('"blocksize": 64', '"blocksize": 96'));
        return { ...t, shape: [data.length], data };
      }),
      says: /quant_state\.blocksize 96 is not a block size bitsandbytes dequantizes \(32, 64, 128/,
    },
  ];
  /** What `diff`/`inspect --check` meet first: the config, then each layer's binding, then the NaN-code check. */
  function firstError(dir: string, check: boolean): InputError {
    const ck = Checkpoint.open(dir);
    try {
      const m = new LlamaCheckpoint(ck);
      for (let L = 0; L < m.cfg.layers; L++) m.loadLayer(L, false);
      if (check) assertNoNanCodes(ck, checkWeights(ck, N, { layers: { from: 2, to: 2 }, faults: null }));
    } catch (e) {
      if (e instanceof InputError) return e;
      throw e;
    } finally {
      ck.close();
    }
    throw new Error(`${dir}: no error`);
  }
  for (const c of cases) {
    it(c.id, () => {
      const dst = path.join(tmp, c.id.replace(/\W+/g, '-'));
      const defect = c.make(dirs[c.src], dst);
      const e = firstError(dst, c.cmd !== undefined);
      expect(e.message).toMatch(c.says);
      const where = e.message + ' ' + JSON.stringify(e);
      if (defect.tensor !== undefined && !/NaN/.test(c.id)) expect(where).toContain(defect.tensor);
      if (/NaN/.test(c.id)) expect(where).toContain(`${M}.weight_scale`);
      if (defect.file !== undefined) expect(where).toContain(defect.file);
    });
  }

  it('end to end: the CLI prints that one line and exits 2', () => {
    const dst = path.join(tmp, 'cli-missing-global');
    dropTensor(dirs['ct-nvfp4'], dst, `${M}.weight_global_scale`);
    const r = cli(['diff', dst]);
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^layerdiff: error: .*model-0000\\d-of-00002\\.safetensors: tensor '${M}\\.weight_global_scale': ct-nvfp4 weight has no global scale`));
  });

  it('an ignore list that contradicts what is stored is reported by inspect (exit 2)', () => {
    const dst = path.join(tmp, 'contradiction');
    editQuantConfig(dirs['modelopt-nvfp4'], dst, (qc) => (qc.ignore = ['lm_head', 'model.layers.2.mlp.*']));
    const r = cli(['inspect', dst]);
    expect(r.code).toBe(2);
    expect(r.stdout).toContain('model.layers.0.self_attn.q_proj.weight: stored plain (BF16) but modelopt declares model.layers.0.self_attn.q_proj nvfp4');
    expect(r.stdout).toContain("model.layers.2.mlp.up_proj.weight: stored nvfp4 but modelopt's ignore list excludes model.layers.2.mlp.up_proj");
    // and one line on stderr, as every exit 2 has, naming the config and the first contradiction
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^layerdiff: error: .*config\.json: the declared quantization contradicts what is stored in \d+ places \(first: model\.layers\.\d+\.\S+\.weight: stored (plain|nvfp4) /);
  });

  it('a stored tensor no path reads is refused by name (a zero point, a group index), KV-cache scales and inv_freq buffers are not', () => {
    const conform = (dir: string) => {
      const ck = Checkpoint.open(dir);
      try {
        new LlamaCheckpoint(ck).conformance();
      } finally {
        ck.close();
      }
    };
    const f32 = (name: string, n: number) => ({ name, dtype: 'F32' as const, shape: [n], data: new Uint8Array(4 * n) });
    for (const [tensor, says] of [
      [`${M}.weight_zero_point`, /weight_zero_point'?: a zero point \(asymmetric quantization\) is not implemented/],
      [`${M}.weight_g_idx`, /weight_g_idx'?: a group index \(activation-order groups\) is not implemented/],
      ['model.layers.1.mlp.shared_gate.weight', /tensor has no role in llama/],
    ] as const) {
      const dst = path.join(tmp, `extra-${tensor.replace(/\W+/g, '-')}`);
      addTensor(dirs['ct-nvfp4'], dst, `${M}.weight_packed`, f32(tensor, 4));
      expect(() => conform(dst), tensor).toThrow(InputError);
      expect(() => conform(dst)).toThrow(says);
    }
    let dst = path.join(tmp, 'extra-kv-scale');
    addTensor(dirs['ct-nvfp4'], dst, `${M}.weight_packed`, f32('model.layers.1.self_attn.k_scale', 1));
    expect(() => conform(dst)).not.toThrow();
    dst = path.join(tmp, 'extra-inv-freq');
    addTensor(dirs['modelopt-nvfp4'], dst, `${M}.weight`, f32('model.layers.2.self_attn.rotary_emb.inv_freq', 16));
    expect(() => conform(dst)).not.toThrow();
  });

  it("what stores the usual format is read: Quark's KV-cache outputs (export.kv_cache_group), compressed-tensors actorder weight/static", () => {
    let dst = path.join(tmp, 'quark-kv-fp8');
    editQuantConfig(dirs['quark-mxfp4'], dst, (qc) => {
      const weight = (qc.global_quant_config as Record<string, unknown>).weight;
      const fp8 = { dtype: 'fp8_e4m3', qscheme: 'per_tensor', is_dynamic: false };
      qc.layer_quant_config = { '*k_proj': { weight, output_tensors: fp8 }, '*v_proj': { weight, output_tensors: fp8 } };
      qc.export = { kv_cache_group: ['*k_proj', '*v_proj'], pack_method: 'reorder', weight_format: 'real_quantized' };
    });
    let ck = Checkpoint.open(dst);
    try {
      expect(parseQuantConfig(ck.config, ck.configFile).groups.map((g) => [g.targets[0].text, g.form])).toEqual([['*k_proj', 'mxfp4'], ['*v_proj', 'mxfp4']]);
    } finally {
      ck.close();
    }
    for (const actorder of ['weight', 'static']) {
      dst = path.join(tmp, `ct-actorder-${actorder}`);
      editQuantConfig(dirs['ct-nvfp4'], dst, (qc) => ((qc.config_groups as Record<string, Record<string, Record<string, unknown>>>).group_0.weights.actorder = actorder));
      ck = Checkpoint.open(dst);
      try {
        expect(parseQuantConfig(ck.config, ck.configFile).groups[0].form).toBe('nvfp4');
      } finally {
        ck.close();
      }
    }
  });

  it("compressed-tensors targets as match_targets ranks them: an exact name, then a regex, then the class, whatever the groups' order", () => {
    const qc = parseQuantConfig({
      quantization_config: {
        quant_method: 'compressed-tensors', format: 'mixed-precision',
        config_groups: {
          all: { format: 'nvfp4-pack-quantized', targets: ['Linear'], weights: { num_bits: 4, type: 'float', group_size: 16, strategy: 'tensor_group', symmetric: true, dynamic: false, actorder: null } },
          down: { format: 'mxfp4-pack-quantized', targets: ['re:.*mlp\\.down_proj$'], weights: { num_bits: 4, type: 'float', group_size: 32, strategy: 'group' } },
          one: { format: 'mxfp4-pack-quantized', targets: ['model.layers.0.mlp.up_proj'], weights: { num_bits: 4, type: 'float', group_size: 32 } },
        },
      },
    }, '/m/config.json');
    expect(declaredFor(qc, 'model.layers.3.mlp.down_proj')).toBe('mxfp4');
    expect(declaredFor(qc, 'model.layers.0.mlp.up_proj')).toBe('mxfp4');
    expect(declaredFor(qc, 'model.layers.1.mlp.up_proj')).toBe('nvfp4');
  });

  it("bitsandbytes' skip list matches a leaf name as transformers does; ModelOpt's W4A16_NVFP4 is NVFP4's weights", () => {
    const bnb = parseQuantConfig({ quantization_config: { quant_method: 'bitsandbytes', load_in_4bit: true, bnb_4bit_quant_type: 'nf4', llm_int8_skip_modules: ['lm_head', 'down_proj'] } }, '/m/config.json');
    expect(declaredFor(bnb, 'model.layers.4.mlp.down_proj')).toBe('plain');
    expect(declaredFor(bnb, 'model.layers.4.mlp.up_proj')).toBe('bnb4');
    expect(declaredFor(bnb, 'model.layers.4.mlp.down_proj_x')).toBe('bnb4');
    const w4a16 = parseQuantConfig({ quantization_config: { quant_method: 'modelopt', quant_algo: 'W4A16_NVFP4', ignore: ['lm_head'] } }, '/m/config.json');
    expect(declaredFor(w4a16, 'model.layers.0.mlp.up_proj')).toBe('nvfp4');
  });

  it('FP8 with static activation scales is refused by name (only dynamic: activations stay in the compute dtype)', () => {
    const cfg = (scheme: unknown) => ({ quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: scheme, weight_block_size: [128, 128] } });
    expect(() => parseQuantConfig(cfg('static'), '/m/config.json')).toThrow(/quantization_config\.activation_scheme "static" is not supported \(only "dynamic"/);
    expect(parseQuantConfig(cfg('dynamic'), '/m/config.json').method).toBe('fp8');
  });

  it("ModelOpt's config_groups decide which linears are declared NVFP4: one group targeting a single module leaves the rest plain", () => {
    const dst = path.join(tmp, 'modelopt-groups');
    editQuantConfig(dirs['modelopt-nvfp4'], dst, (qc) => ((qc.config_groups as Record<string, Record<string, unknown>>).group_0.targets = ['model.layers.1.mlp.up_proj']));
    const ck = Checkpoint.open(dst);
    try {
      const parsed = parseQuantConfig(ck.config, ck.configFile);
      expect(declaredFor(parsed, 'model.layers.1.mlp.up_proj')).toBe('nvfp4');
      expect(declaredFor(parsed, 'model.layers.1.mlp.down_proj')).toBe('plain');
      expect(declaredFor(parsed, 'lm_head')).toBe('plain');
      // what is stored still decides the format; the contradiction is named
      expect(contradictions(ck, parsed)).toContain("model.layers.1.mlp.down_proj.weight: stored nvfp4 but modelopt's config_groups do not target model.layers.1.mlp.down_proj");
    } finally {
      ck.close();
    }
  });

  it("ModelOpt's legacy hf_quant_config.json is read when config.json has no quantization_config", () => {
    const dst = path.join(tmp, 'legacy');
    const qc = editQuantConfig(dirs['modelopt-nvfp4'], dst, () => undefined);
    const cfgFile = path.join(dst, qc.file!);
    const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8')) as Record<string, unknown>;
    delete cfg.quantization_config;
    fs.writeFileSync(cfgFile, JSON.stringify(cfg));
    fs.writeFileSync(
      path.join(dst, 'hf_quant_config.json'),
      JSON.stringify({ producer: { name: 'modelopt', version: '0.27.1' }, quantization: { quant_algo: 'NVFP4', kv_cache_quant_algo: null, group_size: 16, exclude_modules: ['lm_head', 'model.layers.0.*'] } }),
    );
    const ck = Checkpoint.open(dst);
    try {
      const parsed = parseQuantConfig(ck.config, ck.configFile);
      expect(parsed.method).toBe('modelopt');
      expect(parsed.file).toBe(path.join(dst, 'hf_quant_config.json'));
      expect(declaredFor(parsed, 'model.layers.0.mlp.up_proj')).toBe('plain');
      expect(declaredFor(parsed, 'model.layers.1.mlp.up_proj')).toBe('nvfp4');
      expect(contradictions(ck, parsed)).toEqual([]);
      const lw = loadLinear(ck, 'model.layers.1.mlp.up_proj.weight', [384, 192], parsed);
      expect(lw.global?.op).toBe('mul');
    } finally {
      ck.close();
    }
    const bad = path.join(tmp, 'legacy-awq');
    fs.cpSync(dst, bad, { recursive: true });
    fs.writeFileSync(path.join(bad, 'hf_quant_config.json'), JSON.stringify({ quantization: { quant_algo: 'NVFP4_AWQ' } }));
    expect(() => parseQuantConfig(JSON.parse(fs.readFileSync(path.join(bad, 'config.json'), 'utf8')), path.join(bad, 'config.json'))).toThrow(InputError);
  });
});
