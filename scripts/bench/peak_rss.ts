/**
 * A benchmark child's own peak RSS, in MiB. Not getrusage's maxrss: Linux carries it across execve (the
 * process's high-water mark starts at the RSS of the process it was forked from), so a child spawned by a bench
 * that had grown to 500 MiB reported 535 MiB for a 94 MiB diff of llama-tiny. /proc/self/status's VmHWM is the
 * high-water mark of this program's own address space, which execve starts afresh. Elsewhere, maxrss.
 */
import * as fs from 'node:fs';

export function peakRssMiB(): number {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m !== null) return Number(m[1]) / 1024;
  } catch {
    // not Linux: fall through
  }
  return process.resourceUsage().maxRSS / 1024;
}
