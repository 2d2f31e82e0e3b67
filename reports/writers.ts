/**
 * One report record, several printers (STYLE §5): format name → renderer. `writeReports` renders every
 * requested file first and writes them only when all rendered, each atomically (temp file + rename), so a
 * run that fails or is interrupted leaves no report and no half file. The target `-` is standard output
 * (one format at a time: the CLI refuses two), for a pipe into jq or a CI step.
 */
import { writeFileAtomic } from '../harness/io/writer.js';
import type { GateReport } from '../harness/gate/report.js';
import type { Report } from '../harness/runner/report.js';
import { GATE_WRITERS } from './gate.js';
import { renderHtml } from './html.js';
import { reportJson } from './json.js';
import { renderJunit } from './junit.js';
import { renderMarkdown } from './markdown.js';

export const REPORT_WRITERS = {
  json: reportJson,
  junit: renderJunit,
  html: renderHtml,
  summary: renderMarkdown,
} as const satisfies Record<string, (r: Report) => string>;

export type ReportFormat = keyof typeof REPORT_WRITERS;

/** The target that means standard output. */
export const STDOUT = '-';

function writeAll<R>(r: R, writers: Record<ReportFormat, (r: R) => string>, targets: Partial<Record<ReportFormat, string>>, stdout: NodeJS.WritableStream): void {
  const rendered: Array<[string, string]> = [];
  for (const [fmt, file] of Object.entries(targets) as Array<[ReportFormat, string | undefined]>) {
    if (file !== undefined) rendered.push([file, writers[fmt](r)]);
  }
  for (const [file, text] of rendered) {
    if (file === STDOUT) stdout.write(text);
    else writeFileAtomic(file, text);
  }
}

export function writeReports(r: Report, targets: Partial<Record<ReportFormat, string>>, stdout: NodeJS.WritableStream = process.stdout): void {
  writeAll(r, REPORT_WRITERS, targets, stdout);
}

export function writeGateReports(g: GateReport, targets: Partial<Record<ReportFormat, string>>, stdout: NodeJS.WritableStream = process.stdout): void {
  writeAll(g, GATE_WRITERS, targets, stdout);
}

/** True when some report goes to standard output: the human-readable text then goes to stderr. */
export function stdoutTaken(targets: Partial<Record<ReportFormat, string>>): boolean {
  return Object.values(targets).some((t) => t === STDOUT);
}
