/**
 * A one-line progress display on stderr, only on a TTY and never with -q: stage i/N, bytes read, elapsed,
 * estimate of the rest. Clipped to the terminal's width (a line that wraps cannot be overwritten by `\r`) and
 * cleared when done.
 */
import type { Checkpoint } from '../io/checkpoint.js';
import type { Progress } from '../runner/run.js';
import { clipToWidth, showProgress } from './terminal.js';

export class ProgressLine {
  private readonly tty = showProgress();
  constructor(
    private readonly ck: Checkpoint | null,
    private readonly total: number,
  ) {}

  update(p: Progress): void {
    if (!this.tty) return;
    const eta = p.done > 0 ? ((p.elapsedMs / p.done) * (this.total - p.done)) / 1000 : 0;
    const mb = this.ck !== null ? ` · ${(this.ck.bytesRead / 2 ** 20).toFixed(1)} MiB read` : '';
    this.show(`${p.stage} (${p.done}/${this.total})${mb} · ${(p.elapsedMs / 1000).toFixed(1)} s · ~${eta.toFixed(0)} s left`);
  }

  show(text: string): void {
    if (this.tty) process.stderr.write(`\r\x1b[K${clipToWidth(text, process.stderr.columns)}`);
  }

  done(): void {
    if (this.tty) process.stderr.write('\r\x1b[K');
  }
}
