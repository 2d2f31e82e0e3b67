/** A one-line progress display on stderr, only on a TTY: stage i/N, bytes read, elapsed, estimate of the rest. */
import type { Checkpoint } from '../io/checkpoint.js';
import type { Progress } from '../runner/run.js';

export class ProgressLine {
  private readonly tty = process.stderr.isTTY === true;
  constructor(
    private readonly ck: Checkpoint,
    private readonly total: number,
  ) {}

  update(p: Progress): void {
    if (!this.tty) return;
    const eta = p.done > 0 ? ((p.elapsedMs / p.done) * (this.total - p.done)) / 1000 : 0;
    const mb = (this.ck.bytesRead / 2 ** 20).toFixed(1);
    process.stderr.write(`\r\x1b[K${p.stage} (${p.done}/${this.total}) · ${mb} MiB read · ${(p.elapsedMs / 1000).toFixed(1)} s · ~${eta.toFixed(0)} s left`);
  }

  done(): void {
    if (this.tty) process.stderr.write('\r\x1b[K');
  }
}
