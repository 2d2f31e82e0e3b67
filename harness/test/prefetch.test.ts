/**
 * Checkpoint.prefetchTensors: one read-ahead advice per run of touching byte ranges in each shard, covering every
 * tensor asked for and nothing between runs (the read-ahead itself is file_io.cc's, observed here as its calls).
 */
import { describe, expect, it, vi } from 'vitest';

const calls: Array<[number, number, number]> = [];
vi.mock('../io/prefetch.js', () => ({
  willNeed: (fd: number, offset: number, length: number) => {
    calls.push([fd, offset, length]);
    return true;
  },
}));

const { Checkpoint } = await import('../io/checkpoint.js');
const { LLAMA_TINY } = await import('./cli.js');

describe('Checkpoint.prefetchTensors', () => {
  it('advises each run of touching tensors once, covering each tensor, and skips what lies between runs', () => {
    const ck = Checkpoint.open(LLAMA_TINY());
    try {
      const layer2 = ck.names().filter((n) => n.startsWith('model.layers.2.'));
      calls.length = 0;
      ck.prefetchTensors(layer2);
      expect(calls.length).toBeGreaterThan(0);
      expect(calls.length, 'fewer advices than tensors').toBeLessThan(layer2.length);
      for (const n of layer2) {
        const i = ck.info(n);
        expect(calls.some(([, o, l]) => o <= i.begin && i.end <= o + l), n).toBe(true);
      }
      // the runs neither overlap nor touch, and every byte advised belongs to a tensor asked for
      const runs = calls.map(([, o, l]) => [o, o + l]).sort((a, b) => a[0] - b[0]);
      for (let k = 1; k < runs.length; k++) expect(runs[k][0], 'touching runs are merged').toBeGreaterThan(runs[k - 1][1]);
      const advised = calls.reduce((n, [, , l]) => n + l, 0);
      const asked = layer2.reduce((n, t) => n + ck.info(t).end - ck.info(t).begin, 0);
      expect(advised).toBe(asked);
      // the first and the last tensor of a shard: two advices, not the bytes between them
      calls.length = 0;
      const shard = ck.weightMap.get(layer2[0])!;
      const inShard = ck.names().filter((n) => ck.weightMap.get(n) === shard).sort((x, y) => ck.info(x).begin - ck.info(y).begin);
      expect(inShard.length).toBeGreaterThan(2);
      const [a, b] = [ck.info(inShard[0]), ck.info(inShard[inShard.length - 1])];
      ck.prefetchTensors([inShard[inShard.length - 1], inShard[0]]);
      expect(calls.map(([, o, l]) => [o, l])).toEqual([[a.begin, a.end - a.begin], [b.begin, b.end - b.begin]]);
    } finally {
      ck.close();
    }
  });
});
