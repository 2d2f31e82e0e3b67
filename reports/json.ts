/** The JSON report, written atomically (temp file + rename): an interrupted run leaves no half file. */
import { writeFileAtomic } from '../harness/io/writer.js';
import type { Report } from '../harness/runner/report.js';

/** JSON has no Infinity/NaN: write them as strings so a reader sees them instead of a silent null. */
export function reportJson(r: Report | object): string {
  return JSON.stringify(r, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v), 2) + '\n';
}

export function writeJsonReport(file: string, r: Report): void {
  writeFileAtomic(file, reportJson(r));
}
