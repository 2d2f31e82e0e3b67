/**
 * Issue 11 point 4: Llama's attention_bias and mlp_bias, implemented in both paths (and the KV-cache decoders
 * and the FP16 cache), on `layerdiff fixture llama-tiny-bias`. The reference is checked against identities
 * that hold whatever the rest of the layer computes:
 *   - o_proj.bias and down_proj.bias are added to the sublayer's output: attn(b) − attn(0) = b_o on every row;
 *   - v_proj.bias passes through attention unchanged (each query's weights sum to 1): attn(b_v) − attn(0) =
 *     W_o·b_v on every row, W_o the exact dequantization, summed here in float64;
 * the q/k biases by their effect (zeroing one changes the output) and by the device path agreeing with the
 * reference (`diff` passes), and both decoders by equal logits with full recompute.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { dequantLinear } from '../../reference-cpu/dequant.js';
import { decodeStored, LlamaReference } from '../../reference-cpu/llama.js';
import type { StoredTensor } from '../formats/linear.js';
import { Checkpoint } from '../io/checkpoint.js';
import { LlamaCheckpoint, type LlamaLayerWeights } from '../models/llama.js';
import { quietDiff } from './cli.js';
import { expectLlamaDecodersMatchRecompute } from './llama-decoders.js';

process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-llama-bias-'));
const dir = path.join(tmp, 'llama-tiny-bias');
let ck: Checkpoint;
let m: LlamaCheckpoint;

beforeAll(() => {
  writeLlamaTiny(dir, { variant: 'bias' });
  ck = Checkpoint.open(dir);
  m = new LlamaCheckpoint(ck);
});
afterAll(() => {
  ck.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const tokens = [1, 17, 4, 123, 42, 7, 300, 5];
const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
const zero = (t: StoredTensor | null): StoredTensor => ({ ...t!, bytes: new Uint8Array(t!.bytes.length) });
const maxAbs = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((mx, v, i) => Math.max(mx, Math.abs(v - b[i])), 0);

describe('llama attention_bias and mlp_bias', () => {
  it('binds a bias for every projection, of shape [out]', () => {
    expect(m.cfg).toMatchObject({ attentionBias: true, mlpBias: true });
    const w = m.loadLayer(1);
    for (const [k, b] of Object.entries(w.bias)) {
      expect(b, k).not.toBeNull();
      expect(b!.shape, k).toEqual([w[k as keyof LlamaLayerWeights['bias']].out]);
    }
  });

  it('o_proj, down_proj and v_proj biases follow their identities in the reference; q/k biases change the output', () => {
    const ref = new LlamaReference(m);
    const x = ref.embed(tokens);
    const w = m.loadLayer(0);
    const D = m.cfg.hidden;
    const S = tokens.length;
    const base = ref.layer(0, x, w, ctx).substages!;
    const without = (k: keyof LlamaLayerWeights['bias']) => ref.layer(0, x, { ...w, bias: { ...w.bias, [k]: zero(w.bias[k]) } }, ctx).substages!;

    const bo = decodeStored(w.bias.o_proj!);
    const noO = without('o_proj');
    const shiftO = Float32Array.from(base.attn.data, (v, i) => v - noO.attn.data[i]);
    expect(maxAbs(shiftO, Float32Array.from({ length: S * D }, (_, i) => bo[i % D]))).toBeLessThan(1e-5);

    // v bias: W_o · b_v in float64, from the exact dequantization
    const bv = decodeStored(w.bias.v_proj!);
    const Wo = dequantLinear(w.o_proj);
    const { heads: H, kvHeads: KV, headDim: hd } = m.cfg;
    const group = H / KV;
    const wob = new Float64Array(D);
    for (let o = 0; o < D; o++) for (let h = 0; h < H; h++) for (let d = 0; d < hd; d++) wob[o] += Wo[o * H * hd + h * hd + d] * bv[Math.floor(h / group) * hd + d];
    const noV = without('v_proj');
    const shiftV = Float32Array.from(base.attn.data, (v, i) => v - noV.attn.data[i]);
    expect(maxAbs(shiftV, Float32Array.from({ length: S * D }, (_, i) => wob[i % D]))).toBeLessThan(1e-4);
    expect(Math.max(...Array.from(wob, Math.abs)), 'the identity is not vacuous').toBeGreaterThan(0.05);

    const bd = decodeStored(w.bias.down_proj!);
    const noD = without('down_proj');
    const shiftD = Float32Array.from(base.mlp.data, (v, i) => v - noD.mlp.data[i]);
    expect(maxAbs(shiftD, Float32Array.from({ length: S * D }, (_, i) => bd[i % D]))).toBeLessThan(1e-5);

    for (const k of ['q_proj', 'k_proj'] as const) expect(maxAbs(without(k).attn.data, base.attn.data), k).toBeGreaterThan(1e-3);
  });

  it('the device path agrees with the reference (diff passes, every stage and sub-stage judged), and an injected fault still fails', async () => {
    const clean = await quietDiff({ model: dir, layers: 'all', device: 'emulated', mode: 'both', freeSelection: false });
    expect(clean.code).toBe(0);
    const bad = await quietDiff({ model: dir, layers: 'all', device: 'emulated', mode: 'both', freeSelection: false, inject: 'fp16-accumulate@2' });
    expect(bad.code).toBe(1);
    expect(bad.report.first_failure).toBe('layer.2');
  });

  it('both decoders equal their full recompute with the biases (device bit for bit)', () => {
    const { dev, ref } = expectLlamaDecodersMatchRecompute(m, [tokens, tokens.slice(0, 5)], 16);
    // and the device is near the reference, as FP16 is
    dev.forEach((l, i) => expect(maxAbs(l, ref[i]), `prompt ${i}`).toBeLessThan(0.05));
  });
});
