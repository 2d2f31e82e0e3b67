/**
 * Errors that reach the user. Every bad input becomes one `InputError` whose message names the file and,
 * when there is one, the tensor; the CLI prints that one line and exits 2. Anything else is a bug (exit 4).
 */
export const ExitCode = {
  pass: 0,
  stageFailed: 1,
  badInput: 2,
  locked: 3,
  internal: 4,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export class InputError extends Error {
  readonly file: string | undefined;
  readonly tensor: string | undefined;
  constructor(message: string, where: { file?: string; tensor?: string } = {}) {
    const parts: string[] = [];
    if (where.file !== undefined) parts.push(where.file);
    if (where.tensor !== undefined) parts.push(`tensor '${where.tensor}'`);
    super(parts.length > 0 ? `${parts.join(': ')}: ${message}` : message);
    this.name = 'InputError';
    this.file = where.file;
    this.tensor = where.tensor;
  }
}

/** The optimized path was asked for without a passing acceptance record (exit 3). */
export class LockedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LockedError';
  }
}
