/**
 * The weights check's batches (weights/batches.ts): the fused compares of many tensors on the reference addon's
 * background thread must give each tensor the report the one-tensor-at-a-time pass gives it, in the order the
 * tensors came, throw the earliest tensor's failure (after everything started has finished), and hand every
 * buffer it drew back to its pool.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LinearWeight } from '../formats/linear.js';
import { ReadPool } from '../io/read_pool.js';
import { Rng } from '../rng.js';
import { FusedBatches } from '../weights/batches.js';
import type { FusedTensor, TensorCheck } from '../weights/check.js';
import { checkExactVsF16RowsReading, type ExactVsF16Read } from '../../reference-cpu/native.js';
import { type FAULT_CODES, loadDeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';

const N = loadDeviceNative();
const cache = new LinearCache(N);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-batches-'));

/** An MXFP4 weight as a producer stores it: random E2M1 codes, E8M0 scales around 2^0. */
function mxfp4(r: Rng, name: string, out: number, inn: number): LinearWeight {
  const w = new Uint8Array((out * inn) / 2);
  for (let i = 0; i < w.length; i++) w[i] = r.int(256);
  const s = new Uint8Array((out * inn) / 32);
  for (let i = 0; i < s.length; i++) s[i] = 120 + r.int(14);
  return {
    name,
    format: 'mxfp4',
    out,
    in: inn,
    weight: { name, dtype: 'U8', shape: [out, inn / 2], bytes: w, file: '' },
    scale: { name: `${name}_scale`, dtype: 'U8', shape: [out, inn / 32], bytes: s, file: '' },
    block: [1, 32],
  } as LinearWeight;
}

type Fault = keyof typeof FAULT_CODES | null;

/** Tensors laid end to end in one file (the last one cut short when `cut`), each with its fused job on that file. */
function tensorsInFile(n: number, faults: (k: number) => Fault, cut = false) {
  const r = new Rng(4242);
  const lws = Array.from({ length: n }, (_, k) => mxfp4(r, `model.layers.0.mlp.experts.${k}.down_proj.weight`, 64 + 8 * (k % 5), 128));
  const file = path.join(tmp, `w-${n}-${cut}`);
  const offsets: number[] = [];
  let at = 0;
  for (const lw of lws) {
    offsets.push(at);
    at += lw.weight.bytes.length;
  }
  const all = new Uint8Array(at);
  lws.forEach((lw, k) => all.set(lw.weight.bytes, offsets[k]));
  fs.writeFileSync(file, cut ? all.subarray(0, at - 100) : all);
  const fd = fs.openSync(file, 'r');
  const make = (k: number, pool: ReadPool): FusedTensor => {
    const lw = lws[k];
    const buf = pool.take(lw.weight.bytes.length); // the weight's buffer, left unfilled by the fused pass
    const own = { ...lw, weight: { ...lw.weight, bytes: buf } };
    const source = cache.rowSource(own, faults(k));
    const fill = { fd, offset: offsets[k] };
    return {
      lw: own,
      base: { name: lw.name } as TensorCheck,
      pending: { bytes: buf, fd, offset: offsets[k], file, fill: () => fs.readSync(fd, buf, 0, buf.length, offsets[k]) },
      job: { kind: 'mxfp4', weight: buf, scale: lw.scale!.bytes, out: lw.out, inn: lw.in, bo: 1, bi: 32, source, fill },
      device: () => new Uint16Array(0),
    };
  };
  const alone = (k: number) => {
    const t = make(k, new ReadPool());
    return checkExactVsF16RowsReading('mxfp4', t.job.weight, t.job.scale, t.job.out, t.job.inn, 1, 32, t.job.source, t.job.fill);
  };
  return { lws, make, alone, close: () => fs.closeSync(fd) };
}

/** A report that carries the fused pass's result, so the test sees exactly what the batch handed to finish. */
const report = (t: FusedTensor, res: ExactVsF16Read | { readError: string }) => ({ ...t.base, res }) as unknown as TensorCheck;
const resultOf = (c: TensorCheck) => (c as unknown as { res: unknown }).res;

/** Add tensors 0 … n−1 through `prepare`, then drain: what was thrown (null when nothing was). */
function failureOf(b: FusedBatches, n: number, prepare: (k: number, pool: ReadPool) => FusedTensor): unknown {
  try {
    for (let k = 0; k < n; k++) b.add((pool) => prepare(k, pool));
    b.drain();
  } catch (e) {
    return e;
  }
  return null;
}

describe('FusedBatches (the weights check\'s fused compares, a batch at a time on the background thread)', () => {
  it('gives every tensor its own one-at-a-time result, in order, across batches, with non-fused reports between them; every buffer goes back', () => {
    const faults = (k: number): Fault => (k % 7 === 3 ? 'nibble-swap' : k % 11 === 5 ? 'e3m0-table' : null);
    const f = tensorsInFile(37, faults);
    try {
      const pools = [new ReadPool(), new ReadPool()] as const;
      const b = new FusedBatches(pools, report, 4);
      const want: unknown[] = [];
      for (let k = 0; k < f.lws.length; k++) {
        if (k % 9 === 4) {
          // a tensor the fused pass does not serve (a NaN scale code, an unfused format): its report as prepared
          const plain = { name: `plain-${k}` } as TensorCheck;
          b.add((pool) => (pool.take(1000), plain));
          want.push(plain);
          continue;
        }
        b.add((pool) => f.make(k, pool));
        want.push(f.alone(k));
      }
      const got = b.drain();
      expect(got).toHaveLength(want.length);
      got.forEach((g, k) => {
        if ('res' in g) expect(resultOf(g), `tensor ${k}`).toEqual(want[k]);
        else expect(g, `tensor ${k}`).toBe(want[k]);
      });
      // the independent side: the faulted devices differ, the right ones do not
      got.forEach((g, k) => {
        if (!('res' in g)) return;
        const res = resultOf(g) as ExactVsF16Read;
        expect(res.firstBad >= 0, `tensor ${k} (${faults(k)})`).toBe(faults(k) !== null);
      });
      for (const p of pools) expect(p.mark(), 'every buffer handed back').toBe(0);
    } finally {
      f.close();
    }
  });

  it('throws the earliest tensor\'s failure, whichever of prepare, the read or finish failed first in time, and hands every buffer back', () => {
    const f = tensorsInFile(20, () => null, true); // the last tensor's read fails: the file ends inside it
    try {
      const pools = [new ReadPool(), new ReadPool()] as const;
      const finished: number[] = [];
      const finish = (t: FusedTensor, res: ExactVsF16Read | { readError: string }) => {
        const k = f.lws.findIndex((lw) => lw.name === t.lw.name);
        finished.push(k);
        if ('readError' in res) throw new Error(`read ${k}: ${res.readError}`);
        if (k === 9) throw new Error('finish 9');
        return report(t, res);
      };
      const err = failureOf(new FusedBatches(pools, finish, 4), f.lws.length, (k, pool) => {
        if (k === 13) throw new Error('prepare 13');
        return f.make(k, pool);
      });
      // tensor 13's prepare fails first in time, tensor 9's finish (in the batch then in flight) comes before it
      expect((err as Error).message).toBe('finish 9');
      expect(finished).toContain(9);
      expect(finished, 'nothing read after the failure').not.toContain(19);
      for (const p of pools) expect(p.mark(), 'every buffer handed back').toBe(0);

      // the read that fails (the file ends inside tensor 19) is thrown when nothing before it failed
      const b2 = new FusedBatches(pools, (t, res) => finish(t, res), 4);
      for (let k = 10; k < f.lws.length; k++) b2.add((pool) => f.make(k, pool));
      expect(() => b2.drain()).toThrow('read 19: the file ended before the tensor did');
      for (const p of pools) expect(p.mark(), 'every buffer handed back').toBe(0);
    } finally {
      f.close();
    }
  });

  it('a batch refused at its start while another is in flight: the batches after it keep their buffers until their results are taken', () => {
    const f = tensorsInFile(12, () => null);
    try {
      const pools = [new ReadPool(), new ReadPool()] as const;
      const poolOf = new Map<string, ReadPool>();
      let released = 0;
      // a tensor's buffers are its pool's until finish has its report: a pool marked at 0 then has handed them back
      const finish = (t: FusedTensor, res: ExactVsF16Read | { readError: string }) => {
        if (poolOf.get(t.lw.name)!.mark() === 0) released++;
        return report(t, res);
      };
      const err = failureOf(new FusedBatches(pools, finish, 4), f.lws.length, (k, pool) => {
        const t = f.make(k, pool);
        poolOf.set(t.lw.name, pool);
        // tensor 5's job names a weight of another shape than its row source: its batch (4–7) is refused as it
        // starts, while tensors 0–3 are in flight; tensors 8–11 make the next batch
        return k === 5 ? { ...t, job: { ...t.job, out: t.job.out + 8 } } : t;
      });
      expect((err as Error).message).toMatch(/^checkF16Rows: weight holds/);
      expect(released, 'no batch ran on buffers already handed back').toBe(0);
      for (const p of pools) expect(p.mark(), 'every buffer handed back').toBe(0);
    } finally {
      f.close();
    }
  });
});
