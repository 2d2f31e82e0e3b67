/**
 * Checkpoint.prefetchTensors: one read-ahead advice per run of touching byte ranges in each shard, covering every
 * tensor asked for and nothing between runs (the read-ahead itself is file_io.cc's, observed here as its calls);
 * and the weights check's use of it: each layer's read-ahead waited for before the layer is read, the next one's
 * queued first.
 */
import { describe, expect, it, vi } from 'vitest';

const calls: Array<[number, number, number]> = [];
vi.mock('../io/prefetch.js', () => ({
  willNeed: (fd: number, offset: number, length: number) => {
    calls.push([fd, offset, length]);
    return true;
  },
  // the mock's marks count its calls, as the addon numbers its read-aheads
  readAheadMark: () => calls.length,
  readAheadWait: (mark: number) => events.push({ wait: mark }),
}));

type Event = { wait: number } | { prefetch: number; mark: number } | { read: number };
const events: Event[] = [];

const { Checkpoint } = await import('../io/checkpoint.js');
const { LLAMA_TINY } = await import('./cli.js');
const { checkWeights, layerOf } = await import('../weights/check.js');
const { loadDeviceNative } = await import('../../device-hip/binding.js');

describe('Checkpoint.prefetchTensors', () => {
  it('advises each run of touching tensors once, covering each tensor, and skips what lies between runs', () => {
    const ck = Checkpoint.open(LLAMA_TINY());
    try {
      const layer2 = ck.names().filter((n) => n.startsWith('model.layers.2.'));
      calls.length = 0;
      expect(ck.prefetchTensors(layer2), 'the mark of the last read-ahead queued').toBe(calls.length);
      expect(ck.prefetchTensors([]), 'nothing queued: no mark to wait for (not an earlier one)').toBe(0);
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

  it('the weights check waits for each layer\'s read-ahead before it reads the layer, having queued the next layer\'s first', () => {
    const ck = Checkpoint.open(LLAMA_TINY());
    try {
      const layerOfAll = (names: Iterable<string>) => [...new Set([...names].map(layerOf))];
      const prefetch = ck.prefetchTensors.bind(ck), read = ck.read.bind(ck), reserve = ck.reserve.bind(ck);
      ck.prefetchTensors = (names) => {
        const list = [...names];
        const mark = prefetch(list);
        if (list.length > 0) events.push({ prefetch: layerOfAll(list)[0]!, mark });
        return mark;
      };
      ck.read = ((name: string) => (events.push({ read: layerOf(name) ?? -1 }), read(name))) as typeof ck.read;
      ck.reserve = ((name: string) => (events.push({ read: layerOf(name) ?? -1 }), reserve(name))) as typeof ck.reserve;
      calls.length = 0;
      events.length = 0;
      const layers = Number(ck.config.num_hidden_layers);
      const w = checkWeights(ck, loadDeviceNative(), { layers: null, faults: null, numLayers: layers });
      expect(w.checked).toBeGreaterThan(0);
      // the layers whose weights are quantized (llama-tiny keeps layer 0 in BF16), each read
      const quantized = [...new Set(events.flatMap((e) => ('read' in e ? [e.read] : [])))];
      expect(quantized.length).toBeGreaterThan(1);
      for (const L of quantized) {
        const first = events.findIndex((e) => 'read' in e && e.read === L);
        const mine = events.find((e): e is { prefetch: number; mark: number } => 'prefetch' in e && e.prefetch === L)!;
        const next = events.findIndex((e) => 'prefetch' in e && e.prefetch === L + 1);
        const waited = events.slice(0, first).filter((e): e is { wait: number } => 'wait' in e).map((e) => e.wait);
        expect(mine, `layer ${L} is read ahead`).toBeDefined();
        expect(Math.max(...waited), `layer ${L}'s read-ahead is waited for before its first read`).toBeGreaterThanOrEqual(mine.mark);
        if (quantized.includes(L + 1)) {
          expect(next, `layer ${L + 1} is queued before layer ${L} is read`).toBeLessThan(first);
          const nextMark = (events[next] as { mark: number }).mark;
          expect(waited.every((m) => m < nextMark || nextMark === mine.mark), `no wait for layer ${L + 1}'s read-ahead before layer ${L} is read`).toBe(true);
        }
      }
      // a range of layers: nothing past it is read ahead (nor waited for)
      events.length = 0;
      const from = quantized[0], to = quantized[1];
      checkWeights(ck, loadDeviceNative(), { layers: { from, to }, faults: null, numLayers: layers });
      const ahead = events.flatMap((e) => ('prefetch' in e ? [e.prefetch] : []));
      expect(ahead, 'the layers read ahead').toEqual([from, to]);
    } finally {
      ck.close();
    }
  });
});
