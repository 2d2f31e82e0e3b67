/**
 * The weights check's fused compares in batches on the reference addon's background thread (issue 15;
 * reference-cpu/native/check_f16.cc): while one batch of tensors is compared, the JS thread prepares the next
 * (reads its scales, makes its row sources, counts its scale NaN codes), work the cores otherwise waited through
 * (~0.1 s of a wide layer's ~0.5 s when each tensor was compared as soon as it was prepared). The worker's threads
 * take the chunks of every batch in flight as they come free, so they wait for each other neither at a tensor's end
 * nor at a batch's.
 *
 * The report is as one tensor at a time would make it: results in the order the tensors were added, and when
 * anything fails, the failure of the earliest tensor is the one thrown, after everything already started has
 * finished (the native pass never outlives the buffers it reads).
 *
 * Memory: a batch's reads are held until its results are taken, so two batches' worth at most (one in flight,
 * one being prepared), each drawn from its own pool so that handing one batch's buffers back leaves the other's.
 */
import { ReadPool } from '../io/read_pool.js';
import { type ExactVsF16Read, type RowsReadingBatch, startRowsReading, waitRowsReading } from '../../reference-cpu/native.js';
import type { FusedTensor, TensorCheck } from './check.js';

/**
 * Tensors a batch: a wide layer's 776 make ~49 batches; a batch of 16 routed experts is 64 MiB of packed weight
 * read by the native pass and 4 MiB of scales held here.
 */
export const BATCH_TENSORS = 16;

interface Group {
  pool: ReadPool;
  mark: number;
  tensors: FusedTensor[];
  slots: number[];
}

let second: ReadPool | null = null;

/** The pool of every other batch (the process's shared pool draws the others): it keeps up to 256 MiB free, a batch's reads and more. */
export function batchPool(): ReadPool {
  return (second ??= new ReadPool(256 * 2 ** 20));
}

export class FusedBatches {
  private readonly results: Array<TensorCheck | null> = [];
  private filling: Group;
  private inFlight: (Group & { batch: RowsReadingBatch }) | null = null;
  private turn = 0;
  private failure: { slot: number; error: unknown } | null = null;

  constructor(
    private readonly pools: readonly [ReadPool, ReadPool],
    private readonly finish: (t: FusedTensor, r: ExactVsF16Read | { readError: string }) => TensorCheck,
    private readonly size = BATCH_TENSORS,
  ) {
    this.filling = this.group();
  }

  /**
   * The next tensor: `prepare` reads what it needs from `pool` (kept until the tensor's batch is done) and gives
   * its report, or the fused job that makes it. Throws the earliest failure so far.
   */
  add(prepare: (pool: ReadPool) => TensorCheck | FusedTensor): void {
    const slot = this.results.length;
    this.results.push(null);
    const g = this.filling;
    const mark = g.pool.mark();
    let p: TensorCheck | FusedTensor;
    try {
      p = prepare(g.pool);
    } catch (error) {
      g.pool.release(mark);
      this.fail(slot, error);
      this.drain();
      throw error; // unreachable: drain throws the earliest failure
    }
    if (!('job' in p)) {
      this.results[slot] = p;
      g.pool.release(mark); // nothing of it is needed later: its buffers serve the next tensor
      return;
    }
    g.tensors.push(p);
    g.slots.push(slot);
    if (g.tensors.length >= this.size) this.launch();
  }

  /** Wait for everything added; the reports in order, or the earliest failure thrown. */
  drain(): TensorCheck[] {
    this.launch();
    this.collect();
    if (this.failure !== null) throw this.failure.error;
    return this.results as TensorCheck[];
  }

  /** Start the batch being filled, then take the results of the one before it (it ran meanwhile). */
  private launch(): void {
    const g = this.filling;
    if (g.tensors.length === 0) return;
    let batch: RowsReadingBatch;
    try {
      batch = startRowsReading(g.tensors.map((t) => t.job));
    } catch (error) {
      g.pool.release(g.mark);
      this.fail(g.slots[0], error);
      // the next group draws from this same pool again: the other one holds the batch still in flight, whose
      // release (collect) hands back everything taken after its mark, a new group's buffers with it
      this.filling = { pool: g.pool, mark: g.pool.mark(), tensors: [], slots: [] };
      return;
    }
    this.collect();
    this.inFlight = { ...g, batch };
    // the next group draws from the pool just handed back, marked only now: a mark is a count of the buffers in
    // use, so one taken before that release would point past the buffers the group then takes
    this.filling = this.group();
    if (this.failure !== null) this.collect(); // stop: wait for the batch just started, read nothing more
    if (this.failure !== null) throw this.failure.error;
  }

  /** The batch in flight's reports, its buffers handed back; a failure is recorded, never thrown here. */
  private collect(): void {
    const f = this.inFlight;
    if (f === null) return;
    this.inFlight = null;
    try {
      const rs = waitRowsReading(f.batch);
      for (let i = 0; i < rs.length; i++) {
        try {
          this.results[f.slots[i]] = this.finish(f.tensors[i], rs[i]);
        } catch (error) {
          this.fail(f.slots[i], error);
          break; // the rest of the batch comes after it
        }
      }
    } catch (error) {
      this.fail(f.slots[0], error);
    } finally {
      f.pool.release(f.mark);
    }
  }

  private fail(slot: number, error: unknown): void {
    if (this.failure === null || slot < this.failure.slot) this.failure = { slot, error };
  }

  private group(): Group {
    const pool = this.pools[this.turn++ % 2];
    return { pool, mark: pool.mark(), tensors: [], slots: [] };
  }
}
