/**
 * The weights-first check: exact on a correct device, each catalog reading agrees with the emulator's
 * injected fault on every quantized tensor (so "this reading reproduces the device" means "this bug"),
 * exactly one reading explains each fault, overflow/underflow/NaN codes are counted, an unexplained
 * difference is "unknown", and `inspect --check` exits 0/1/2.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { diagnoseWeights } from '../compare/diagnose.js';
import type { LinearWeight } from '../formats/linear.js';
import { loadLinear, parseQuantConfig } from '../formats/linear.js';
import { Checkpoint } from '../io/checkpoint.js';
import { checkTensor, checkWeights, quantizedWeights } from '../weights/check.js';
import { CORRECT, READINGS, reproduces, WEIGHT_CAUSES as ALL_CAUSES } from '../weights/decode.js';
import { faultApplies } from '../formats/registry.js';

/** The catalog readings that can show in llama-tiny's formats (MXFP4, FP8 blocks); NVFP4's are tested in formats.test.ts. */
const WEIGHT_CAUSES = ALL_CAUSES.filter((c) => faultApplies(c, 'mxfp4', 'e8m0') || faultApplies(c, 'fp8-block', 'e8m0'));
import { FAULT_CODES, loadDeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';
import { copyCheckpoint, nanWeight } from '../../fixtures/inject.js';
import { InputError } from '../errors.js';
import { cli, LLAMA_TINY } from './cli.js';
import { substageOrder } from '../runner/run.js';
import { packageRoot } from '../version.js';

const N = loadDeviceNative();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-weights-'));

function withTiny<T>(f: (ck: Checkpoint) => T): T {
  const ck = Checkpoint.open(LLAMA_TINY());
  try {
    return f(ck);
  } finally {
    ck.close();
  }
}

function tinyLinears(ck: Checkpoint): LinearWeight[] {
  const qc = parseQuantConfig(ck.config, ck.configFile);
  return quantizedWeights(ck).map(({ name }) => {
    const i = ck.info(name);
    return loadLinear(ck, name, i.dtype === 'F8_E4M3' ? [i.shape[0], i.shape[1]] : [i.shape[0], 2 * i.shape[1]], qc);
  });
}

describe('weights check on llama-tiny', () => {
  it('a correct device dequantizes every quantized tensor exactly', () => {
    const w = withTiny((ck) => checkWeights(ck, N, { layers: null, faults: null }));
    expect(w.checked).toBe(21); // 7 linears × layers 1–3 (layer 0 is BF16)
    expect(w.layers).toEqual([1, 3]);
    expect(w.mismatched).toBe(0);
    expect(w.nan_codes + w.overflow_blocks + w.underflow_blocks).toBe(0);
    for (const t of w.tensors) expect(t, t.name).toMatchObject({ exact: true, bad_blocks: 0, max_abs: 0, matches: [] });
    // formats as stored: FP8 attention (E8M0 scales in layers 1–2, F32 in layer 3), MXFP4 MLP
    expect(w.tensors.filter((t) => t.format === 'mxfp4').length).toBe(9);
    expect(w.tensors.filter((t) => t.scale.dtype === 'F32').length).toBe(4);
  });

  it('--layers restricts the check to the range', () => {
    const w = withTiny((ck) => checkWeights(ck, N, { layers: { from: 2, to: 2 }, faults: null }));
    expect(w.checked).toBe(7);
    expect(new Set(w.tensors.map((t) => t.layer))).toEqual(new Set([2]));
  });

  for (const cause of WEIGHT_CAUSES) {
    it(`reading ${cause} equals dequantToF16(fault=${FAULT_CODES[cause]}) on every quantized tensor`, () => {
      withTiny((ck) => {
        for (const lw of tinyLinears(ck)) {
          const kind = lw.format === 'mxfp4' ? 0 : 1;
          const dev = N.dequantToF16(kind, lw.weight.bytes, lw.scale!.bytes, lw.scale!.dtype === 'F32', lw.out, lw.in, lw.block[0], lw.block[1], FAULT_CODES[cause]);
          expect(reproduces(lw, READINGS[cause], dev), `${cause} on ${lw.name}`).toBe(true);
          // and the correct reading is the device without a fault
          const clean = N.dequantToF16(kind, lw.weight.bytes, lw.scale!.bytes, lw.scale!.dtype === 'F32', lw.out, lw.in, lw.block[0], lw.block[1], 0);
          expect(reproduces(lw, CORRECT, clean), lw.name).toBe(true);
        }
      });
    });
  }

  for (const [inject, layer] of [...WEIGHT_CAUSES.map((c) => [c, null] as const), ['scale-axis', 2] as const, ['nibble-swap', 3] as const]) {
    it(`fault ${inject}${layer !== null ? `@${layer}` : ''}: every differing tensor is explained by that reading alone`, () => {
      const w = withTiny((ck) => checkWeights(ck, N, { layers: null, faults: { fault: inject, layer } }));
      expect(w.mismatched).toBeGreaterThan(0);
      for (const t of w.tensors.filter((x) => !x.exact)) {
        expect(t.matches, t.name).toEqual([inject]);
        if (layer !== null) expect(t.layer).toBe(layer);
      }
      const d = diagnoseWeights(w, null);
      expect(d.map((x) => x.cause)).toEqual([inject]);
      expect(d[0].stage).toBe(`layer.${layer ?? 1}`);
    });
  }
});

describe('weights check on deepseek-v4-tiny (FP8 attention and shared experts, MXFP4 routed experts)', () => {
  const dir = path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
  const open = <T>(f: (ck: Checkpoint) => T) => {
    const ck = Checkpoint.open(dir);
    try {
      return f(ck);
    } finally {
      ck.close();
    }
  };
  it('every routed expert is checked, routed to or not, and a correct device is exact', () => {
    const w = open((ck) => checkWeights(ck, N, { layers: null, faults: null }));
    expect(w.checked).toBe(open((ck) => quantizedWeights(ck).filter((t) => t.layer !== null).length));
    expect(w.tensors.some((t) => /\.ffn\.experts\.\d+\.w2\.weight$/.test(t.name) && t.format === 'mxfp4')).toBe(true);
    expect(w.mismatched).toBe(0);
  });
  it('a layer-local scale bug is found in that layer only and named', () => {
    const w = open((ck) => checkWeights(ck, N, { layers: null, faults: { fault: 'scale-stride', layer: 2 } }));
    const bad = w.tensors.filter((t) => !t.exact);
    expect(bad.length).toBeGreaterThan(0);
    expect(new Set(bad.map((t) => t.layer))).toEqual(new Set([2]));
    expect(diagnoseWeights(w, null).map((d) => [d.stage, d.cause])).toEqual([['layer.2', 'scale-stride']]);
  });
  it('sub-stages are drilled in forward order: the router before the MoE output it feeds', () => {
    expect(substageOrder(['attn', 'moe', 'moe.router'])).toEqual(['attn', 'moe.router', 'moe']);
    expect(substageOrder(['attn', 'mlp'])).toEqual(['attn', 'mlp']);
  });
});

describe('weights check on synthetic tensors', () => {
  // mxfp4 [2, 64]: blocks (0,0) 6·2^15 overflows FP16, (0,1) ordinary, (1,0) 0.5·2^−30 underflows, (1,1) zeros
  const packed = new Uint8Array(64);
  packed.fill(0x77, 0, 16);
  packed.fill(0x21, 16, 32);
  packed.fill(0x11, 32, 48);
  const mx = (scales: number[]): LinearWeight => ({
    name: 'synthetic.weight',
    format: 'mxfp4',
    out: 2,
    in: 64,
    weight: { name: 'synthetic.weight', dtype: 'I8', shape: [2, 32], bytes: packed },
    scale: { name: 'synthetic.scale', dtype: 'F8_E8M0', shape: [2, 2], bytes: Uint8Array.from(scales) },
    block: [1, 32],
  });

  it('counts blocks whose exact values overflow or underflow FP16 (a correct device still matches)', () => {
    const t = checkTensor(mx([127 + 15, 127, 127 - 30, 127]), 0, new LinearCache(N), null);
    expect(t).toMatchObject({ exact: true, overflow_blocks: 1, underflow_blocks: 1, device_nonfinite: 32, nan_codes: 0 });
  });

  it('counts E8M0 NaN codes and compares nothing', () => {
    const t = checkTensor(mx([127, 0xff, 127, 127]), 0, new LinearCache(N), null);
    expect(t).toMatchObject({ exact: false, nan_codes: 1, nan_in: 'scale' });
  });

  it('a difference no reading reproduces is "unknown", with the evidence', () => {
    // a device that gets one weight wrong by one FP16 ulp: no catalog bug looks like that
    const lw = mx([120, 121, 122, 123]);
    const liar = { get: () => {
      const bits = new LinearCache(N).get(lw, null).slice();
      bits[40] ^= 1;
      return bits;
    } };
    const t = checkTensor(lw, 5, liar, null);
    expect(t).toMatchObject({ exact: false, bad_blocks: 1, first_bad_block: [0, 1], matches: [] });
    const d = diagnoseWeights({ layers: [5, 5], checked: 1, exact: 0, mismatched: 1, nan_codes: 0, overflow_blocks: 0, underflow_blocks: 0, skipped: 0, time_ms: 0, tensors: [t], by_format: {} }, null);
    expect(d).toHaveLength(1);
    expect(d[0]).toMatchObject({ stage: 'layer.5', cause: 'unknown', source: 'weights' });
    expect(d[0].evidence).toMatch(/no catalog reading .* reproduces them; e\.g\. synthetic\.weight: 1\/4 scale blocks differ/);
  });
});

describe('the fused read (MXFP4 and FP8-block weights read by the compare itself)', () => {
  it('reports every tensor exactly as checking the tensors read whole does, with and without a device fault', () => {
    withTiny((ck) => {
      for (const fault of [null, 'nibble-swap', 'scale-axis'] as const) {
        const plan = fault === null ? null : { fault, layer: null };
        const w = checkWeights(ck, N, { layers: null, faults: plan });
        const cache = new LinearCache(N);
        const lws = tinyLinears(ck);
        expect(w.tensors.map((t) => t.name)).toEqual(lws.map((lw) => lw.name));
        lws.forEach((lw, k) => expect(w.tensors[k], `${fault}: ${lw.name}`).toEqual(checkTensor(lw, w.tensors[k].layer, cache, fault)));
        if (fault !== null) expect(w.mismatched, fault).toBeGreaterThan(0);
      }
    });
  });

  it('without the device\'s row source the weights are read whole first, with the same report', () => {
    withTiny((ck) => {
      const fused = checkWeights(ck, N, { layers: null, faults: { fault: 'nibble-swap', layer: null } });
      const noSource = { ...N, dequantRowSource: undefined };
      const whole = checkWeights(ck, noSource, { layers: null, faults: { fault: 'nibble-swap', layer: null } });
      expect(whole.tensors).toEqual(fused.tensors);
      expect(whole.mismatched).toBeGreaterThan(0);
    });
  });

  for (const victim of ['model.layers.3.mlp.down_proj.weight', 'model.layers.1.self_attn.q_proj.weight']) it(`a shard cut short after it was opened inside ${victim} (${victim.includes('mlp') ? 'MXFP4' : 'FP8'}): one InputError from the fused read naming the file and the tensor`, () => {
    const dir = path.join(tmp, `shrunk-${victim}`);
    copyCheckpoint(LLAMA_TINY(), dir);
    const ck = Checkpoint.open(dir);
    try {
      const info = ck.info(victim);
      const shard = path.join(dir, ck.weightMap.get(victim)!);
      fs.truncateSync(shard, info.begin + Math.floor((info.end - info.begin) / 2));
      let err: unknown = null;
      try {
        checkWeights(ck, N, { layers: null, faults: null });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InputError);
      expect((err as InputError).tensor).toBe(victim);
      expect((err as InputError).file).toBe(shard);
      expect((err as Error).message).toMatch(/read failed: the file ended before the tensor did/);
    } finally {
      ck.close();
    }
  });
});

describe('layerdiff inspect --check', () => {
  it('exits 0 when every weight is exact', () => {
    const r = cli(['inspect', LLAMA_TINY(), '--check']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/conformance: /);
    expect(r.stdout).toMatch(/PASS — every device FP16 weight is the reference's, bit for bit/);
    expect(r.stdout).toContain('model.layers.3.mlp.down_proj.weight');
  });
  it('exits 1 and names the reading when the device decodes differently', () => {
    const json = path.join(tmp, 'w.json');
    const r = cli(['inspect', LLAMA_TINY(), '--check', '--inject', 'e3m0-table', '--json', json]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/likely cause at layer\.1: e3m0-table — /);
    const j = JSON.parse(fs.readFileSync(json, 'utf8'));
    expect(j.weights.mismatched).toBe(9);
    expect(j.diagnosis[0].cause).toBe('e3m0-table');
  });
  it("inspect: the check's options without --check, a bad --layers and a fault the checkpoint cannot carry are one line, exit 2, before anything is printed", () => {
    const gptOss = path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny');
    for (const [args, says] of [
      [['inspect', LLAMA_TINY(), '--json', path.join(tmp, 'never.json')], /--json goes with --check/],
      [['inspect', LLAMA_TINY(), '--inject', 'nibble-swap'], /--inject goes with --check/],
      [['inspect', LLAMA_TINY(), '--layers', '1'], /--layers goes with --check/],
      [['inspect', LLAMA_TINY(), '--check', '--layers', '9'], /--layers 9: the model has layers 0-3/],
      [['inspect', gptOss, '--check', '--inject', 'scale-block-size'], /--inject scale-block-size: touches no quantized tensor of this checkpoint/],
    ] as const) {
      const r = cli([...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(says);
      if (!args.includes('scale-block-size')) expect(r.stdout, args.join(' ')).toBe('');
    }
    expect(fs.existsSync(path.join(tmp, 'never.json'))).toBe(false);
  });
  it('exits 2 naming the scale that holds a NaN code', () => {
    const dir = path.join(tmp, 'nan');
    const defect = nanWeight(LLAMA_TINY(), dir, 'model.layers.2.mlp.gate_proj.weight');
    const json = path.join(tmp, 'nan-report', 'w.json');
    const r = cli(['inspect', dir, '--check', '--json', json]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(defect.tensor!);
    expect(r.stderr).toContain(defect.file!);
    expect(fs.existsSync(json), 'bad input leaves no report behind').toBe(false);
  });
  it('exits 2 naming the FP8 weight that holds an E4M3 NaN code (counted while the fused pass reads it)', () => {
    const dir = path.join(tmp, 'nan-fp8');
    const defect = nanWeight(LLAMA_TINY(), dir, 'model.layers.1.self_attn.q_proj.weight');
    expect(defect.tensor).toBe('model.layers.1.self_attn.q_proj.weight');
    const r = cli(['inspect', dir, '--check']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(defect.tensor!);
    expect(r.stderr).toContain(defect.file!);
    expect(r.stderr).toMatch(/NaN/);
  });
});
