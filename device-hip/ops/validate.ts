/**
 * The argument checks the generated validators (surfaces.generated.ts) call. Their messages are the C++ readers'
 * (src/op_read.h) word for word: a test holds both equal for every argument of every op.
 */

type TypedCtor = Uint8ArrayConstructor | Uint16ArrayConstructor | Float32ArrayConstructor | Int32ArrayConstructor;

/** ⌈a/b⌉ and ⌊a/b⌋ of the table's expressions (non-negative integers far below 2^53: exact). */
export const cdiv = (a: number, b: number): number => Math.ceil(a / b);
export const div = (a: number, b: number): number => Math.floor(a / b);
/** x is finite once rounded to f32 (what the kernels receive). */
export const finite32 = (x: number): boolean => Number.isFinite(Math.fround(x));

export function int(fn: string, name: string, v: unknown, min: number): void {
  if (typeof v !== 'number') throw new TypeError(`${fn}: ${name} must be a number, got ${typeof v}`);
  if (!Number.isInteger(v) || v < min || v > 0x7fffffff) throw new RangeError(`${fn}: ${name} must be an integer >= ${min}, got ${v}`);
}

export function num(fn: string, name: string, v: unknown): void {
  if (typeof v !== 'number') throw new TypeError(`${fn}: ${name} must be a number, got ${typeof v}`);
}

export function bool(fn: string, name: string, v: unknown): void {
  if (typeof v !== 'boolean') throw new TypeError(`${fn}: ${name} must be a boolean, got ${typeof v}`);
}

/**
 * A typed array of `ctor` (or null/undefined when nullable) with the product of `dims` elements (null: any
 * length) and, with `range`, every element in [lo, hi).
 */
export function arr(fn: string, name: string, v: unknown, ctor: TypedCtor, nullable: boolean, dims: number[] | null, label: string, range?: [number, number]): void {
  if (nullable && (v === null || v === undefined)) return;
  if (!(v instanceof ctor)) throw new TypeError(`${fn}: ${name} must be a ${ctor.name}${nullable ? ' or null' : ''}`);
  if (dims !== null) {
    const want = dims.reduce((p, d) => p * d, 1);
    if (v.length !== want) throw new RangeError(`${fn}: ${name} has ${v.length} elements, expected ${label} [${dims.join('×')}] = ${want}`);
  }
  if (range !== undefined) {
    const [lo, hi] = range;
    for (let i = 0; i < v.length; i++) {
      if (v[i] < lo || v[i] >= hi) throw new RangeError(`${fn}: ${name}[${i}] = ${v[i]} is outside [${lo}, ${hi})`);
    }
  }
}
