/**
 * Architecture.lengthRegimes: the sequence lengths at which a checkpoint's forward pass starts to do what shorter
 * sequences never make it do (generate names those past the gate's longest prompt). Checked two ways: against each
 * fixture's config.json, read here, by the rules of the references (reference-cpu/ops.ts causalAttention: keys
 * max(0, t − W + 1) … t; reference-cpu/deepseek_v4/attention.ts: ⌊(t + 1) / r⌋ compressed entries visible to t);
 * and observed, without those rules: the FP32 reference runs the fixture and a copy whose config or weights change
 * only what one regime is about (a wider window, a larger index_topk, one compressor's weights, the half of a ratio-4
 * compressor that pools the previous block), and the first position whose hidden state differs, bit for bit, is the
 * regime's sequence length less one (the references are causal: position t reads tokens 0 … t only).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { architectureFor } from '../arch/registry.js';
import { Checkpoint } from '../io/checkpoint.js';
import { DeepseekV4Checkpoint } from '../models/deepseek_v4.js';
import { GptOssCheckpoint } from '../models/gpt_oss.js';
import type { StagePath } from '../models/path.js';
import { packageRoot } from '../version.js';
import { editConfig, scaleBf16Tensor } from '../../fixtures/inject.js';
import { DeepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { GptOssReference } from '../../reference-cpu/gpt_oss.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-regimes-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const fixture = (kind: string) => path.join(packageRoot(), 'fixtures', kind);

/** Every position's hidden state after the last layer, from the FP32 reference, for `tokens`. */
function hidden(dir: string, tokens: number[]): Float32Array[] {
  const ck = Checkpoint.open(dir);
  try {
    const run = <LW>(layers: number, loadLayer: (L: number) => LW, p: StagePath<LW>) => {
      let x = p.embed(tokens);
      for (let L = 0; L < layers; L++) x = p.layer(L, x, loadLayer(L), { tokens, positions: tokens.map((_, i) => i), forcedSelections: null }).out;
      const row = x.data.length / tokens.length;
      return tokens.map((_, t) => x.data.slice(t * row, (t + 1) * row));
    };
    if (architectureFor(ck).name === 'gpt_oss') {
      const m = new GptOssCheckpoint(ck);
      return run(m.cfg.layers, (L) => m.loadLayer(L), new GptOssReference(m));
    }
    const m = new DeepseekV4Checkpoint(ck);
    return run(m.cfg.layers, (L) => m.loadLayer(L), new DeepseekV4Reference(m));
  } finally {
    ck.close();
  }
}

/** The sequence length at which `changed`'s forward pass first differs from `base`'s (the first differing position + 1). */
function observedRegime(base: string, changed: string, length: number): number | null {
  const tokens = Array.from({ length }, (_, i) => (i * 97 + 13) % 384);  // both fixtures' vocab is 384
  const a = hidden(base, tokens), b = hidden(changed, tokens);
  const t = a.findIndex((row, i) => row.some((v, j) => !Object.is(v, b[i][j])));
  return t < 0 ? null : t + 1;
}

/** A copy of `kind` whose BF16 `tensor` has rows [r0, r1) scaled by 1.5. */
function scaledRows(kind: string, name: string, tensor: string, r0: number, r1: number): string {
  const dst = path.join(tmp, name);
  scaleBf16Tensor(fixture(kind), dst, tensor, 1.5, [r0, r1]);
  return dst;
}

const regimes = (kind: string) => {
  const ck = Checkpoint.open(path.join(packageRoot(), 'fixtures', kind));
  try {
    return { config: JSON.parse(fs.readFileSync(path.join(ck.dir, 'config.json'), 'utf8')) as Record<string, unknown>, got: architectureFor(ck).lengthRegimes?.(ck) ?? [] };
  } finally {
    ck.close();
  }
};

describe('length regimes', () => {
  it('gpt-oss: its sliding-window layers drop their first key when the sequence passes sliding_window', () => {
    const { config, got } = regimes('gpt-oss-tiny');
    const W = config.sliding_window as number;
    const sliding = (config.layer_types as string[]).filter((t) => t === 'sliding_attention').length;
    expect(sliding).toBeGreaterThan(0);
    // at W tokens the last token's keys are 0 … W − 1, all of them; at W + 1 key 0 is out of its window
    expect(got.map((r) => r.tokens)).toEqual([W + 1]);
    expect(got[0].what).toContain(`${sliding} of ${config.num_hidden_layers as number}`);
  });

  it('DeepSeek-V4: the window, each compress ratio\'s first entry and the indexer\'s first choice, in order', () => {
    const { config, got } = regimes('deepseek-v4-tiny');
    const ratios = (config.compress_ratios as number[]).slice(0, config.num_hidden_layers as number);
    const topk = config.index_topk as number;
    // a ratio-r layer's first entry is visible to t = r − 1 (a sequence of r); the ratio-4 indexer keeps topk of
    // ⌊(t + 1) / 4⌋ visible entries, a choice once there are topk + 1 of them
    // and a ratio-4 entry b pools block b − 1 too (nothing before block 0): entry 1, at 8 tokens, is the first to use
    // the overlap's weights
    const want = [(config.sliding_window as number) + 1, ...new Set(ratios.filter((r) => r > 0)), ...(ratios.includes(4) ? [8, 4 * (topk + 1)] : [])].sort((a, b) => a - b);
    expect(got.map((r) => r.tokens)).toEqual(want);
    for (const r of new Set(ratios.filter((x) => x > 0))) {
      const layers = ratios.flatMap((x, L) => (x === r ? [L] : []));
      expect(got.find((g) => g.tokens === r)!.what).toContain(`ratio-${r} attention of layer${layers.length > 1 ? 's' : ''} ${layers.join(', ')} `);
    }
  });

  it('gpt-oss, observed: a window wider than any sequence here first changes the forward pass at the regime', () => {
    const { config, got } = regimes('gpt-oss-tiny');
    const wide = path.join(tmp, 'gpt-oss-wide-window');
    editConfig(fixture('gpt-oss-tiny'), wide, (c) => void (c.sliding_window = 1024));
    expect(observedRegime(fixture('gpt-oss-tiny'), wide, (config.sliding_window as number) + 4)).toBe(got[0].tokens);
  });

  it('DeepSeek-V4, observed: each regime is where changing what it is about first changes the forward pass', () => {
    const { config, got } = regimes('deepseek-v4-tiny');
    const at = (pattern: RegExp) => got.find((r) => pattern.test(r.what))!.tokens;
    const window = config.sliding_window as number, dc = config.head_dim as number;
    const length = Math.max(...got.map((r) => r.tokens)) + 3;
    const K = 'deepseek-v4-tiny';
    const ratios = (config.compress_ratios as number[]).slice(0, config.num_hidden_layers as number);
    const r4 = ratios.indexOf(4), r16 = ratios.indexOf(16);
    expect(r4).toBeGreaterThan(0);
    expect(r16).toBeGreaterThan(0);
    const wideWindow = path.join(tmp, 'ds-wide-window');
    editConfig(fixture(K), wideWindow, (c) => void (c.sliding_window = 4 * window));
    const allEntries = path.join(tmp, 'ds-topk');
    editConfig(fixture(K), allEntries, (c) => void (c.index_topk = 1024));
    const observed = {
      window: observedRegime(fixture(K), wideWindow, length),
      topk: observedRegime(fixture(K), allEntries, length),
      // a ratio-4 compressor's block-b channels [dc, 2dc), and a ratio-16 one's whole projection: its entries
      ratio4: observedRegime(fixture(K), scaledRows(K, 'ds-r4', `layers.${r4}.attn.compressor.wkv.weight`, dc, 2 * dc), length),
      ratio16: observedRegime(fixture(K), scaledRows(K, 'ds-r16', `layers.${r16}.attn.compressor.wkv.weight`, 0, dc), length),
      // channels [0, dc): block b − 1's part of entry b, so nothing before entry 1
      overlap: observedRegime(fixture(K), scaledRows(K, 'ds-overlap', `layers.${r4}.attn.compressor.wkv.weight`, 0, dc), length),
    };
    expect(observed).toEqual({
      window: at(/sliding window/),
      topk: at(/index_topk/),
      ratio4: at(/ratio-4 attention/),
      ratio16: at(/ratio-16 attention/),
      overlap: at(/overlap/),
    });
  });

  it('Llama: none (every position runs the same code; max_position_embeddings bounds it)', () => {
    expect(regimes('llama-tiny').got).toEqual([]);
  });
});
