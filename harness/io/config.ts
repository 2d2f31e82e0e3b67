/** Typed reads of config.json fields: a wrong or missing field is one InputError naming the file and key. */
import { InputError } from '../errors.js';

export class ConfigReader {
  constructor(
    readonly raw: Record<string, unknown>,
    readonly file: string,
  ) {}

  private fail(key: string, want: string): never {
    throw new InputError(`${key} must be ${want}, got ${JSON.stringify(this.raw[key])}`, { file: this.file });
  }

  int(key: string, fallback?: number, min = 1): number {
    const v = this.raw[key];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(key, `an integer ≥ ${min}`);
    }
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) this.fail(key, `an integer ≥ ${min}`);
    return v;
  }

  num(key: string, fallback?: number): number {
    const v = this.raw[key];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(key, 'a finite number');
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) this.fail(key, 'a finite number');
    return v;
  }

  /** A finite number > 0 (a norm's eps, RoPE's theta, a clamp limit): zero or a negative one describes no model. */
  positive(key: string, fallback?: number): number {
    const v = this.num(key, fallback);
    if (!(v > 0)) throw new InputError(`${key} must be a positive number, got ${JSON.stringify(this.raw[key])}`, { file: this.file });
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.raw[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'boolean') this.fail(key, 'true or false');
    return v;
  }

  str(key: string, fallback?: string): string {
    const v = this.raw[key];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(key, 'a string');
    }
    if (typeof v !== 'string') this.fail(key, 'a string');
    return v;
  }

  intList(key: string): number[] {
    const v = this.raw[key];
    if (!Array.isArray(v) || !v.every((x) => Number.isSafeInteger(x) && x >= 0)) this.fail(key, 'a list of non-negative integers');
    return v as number[];
  }

  obj(key: string): ConfigReader | undefined {
    const v = this.raw[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) this.fail(key, 'an object');
    return new ConfigReader(v as Record<string, unknown>, `${this.file} (${key})`);
  }

  /** The HF `architectures[0]`, or model_type. */
  architecture(): string {
    const a = this.raw.architectures;
    if (Array.isArray(a) && typeof a[0] === 'string') return a[0];
    return this.str('model_type');
  }
}
