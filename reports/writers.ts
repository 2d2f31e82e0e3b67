/**
 * One report record, several printers (STYLE §5): format name → renderer. `writeReports` renders every
 * requested file first and writes them only when all rendered, each atomically (temp file + rename), so a
 * run that fails or is interrupted leaves no report and no half file.
 */
import { writeFileAtomic } from '../harness/io/writer.js';
import type { Report } from '../harness/runner/report.js';
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

export function writeReports(r: Report, targets: Partial<Record<ReportFormat, string>>): void {
  const rendered: Array<[string, string]> = [];
  for (const [fmt, file] of Object.entries(targets) as Array<[ReportFormat, string | undefined]>) {
    if (file !== undefined) rendered.push([file, REPORT_WRITERS[fmt](r)]);
  }
  for (const [file, text] of rendered) writeFileAtomic(file, text);
}
