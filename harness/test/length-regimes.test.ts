/**
 * Architecture.lengthRegimes: the sequence lengths at which a checkpoint's forward pass starts to do what shorter
 * sequences never make it do (generate names those past the gate's longest prompt). Checked against each fixture's
 * config.json, read here, by the rules of the references (reference-cpu/ops.ts causalAttention: keys
 * max(0, t − W + 1) … t; reference-cpu/deepseek_v4/attention.ts: ⌊(t + 1) / r⌋ compressed entries visible to t).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { architectureFor } from '../arch/registry.js';
import { Checkpoint } from '../io/checkpoint.js';
import { packageRoot } from '../version.js';

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

  it('Llama: none (every position runs the same code; max_position_embeddings bounds it)', () => {
    expect(regimes('llama-tiny').got).toEqual([]);
  });
});
