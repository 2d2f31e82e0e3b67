/**
 * The op table (device-hip/ops/table.ts) drives every reader of an op's arguments: the TypeScript validators,
 * the emulation addon's C++ readers and the hip addon's GPU and host-reference entries. These tests hold
 *   - the committed generated files equal to a fresh generation (edit the table, run npm run gen:ops);
 *   - the four readers equal on every argument of every op: the same error class and the same message for a
 *     wrong type, a wrong length, an out-of-range integer or element, a missing argument;
 *   - each op's wiring: a valid call reaches the emulation's kernel and the hip addon's GPU entry (which then
 *     refuses before open()), and the emulation's result equals the host reference's bit for bit, so the
 *     generated call templates hand each argument to the right parameter.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../binding.js';
import { loadHipAddon } from '../hip/hip_native.js';
import { translate } from '../ops/expr.js';
import { generate } from '../ops/generate.js';
import { CONSTS, type ArrayArg, type OpDecl, OPS } from '../ops/table.js';
import * as surfaces from '../ops/surfaces.generated.js';
import { cdiv, div, finite32 } from '../ops/validate.js';

const root = path.resolve(import.meta.dirname, '..', '..');
const emu = loadAddon('ld_device') as Record<string, (...a: unknown[]) => unknown>;
const hip = loadHipAddon() as unknown as Record<string, (...a: unknown[]) => unknown> | null;

const VALIDATORS: Record<string, (raw: never) => Record<string, (...a: unknown[]) => unknown>> = {
  device: surfaces.validatedDeviceOps as never,
  decode: surfaces.validatedDecodeNative as never,
  deepseek: surfaces.validatedDeepseekNative as never,
  gptOss: surfaces.validatedGptOssNative as never,
  hostRef: surfaces.validatedHostRefOps as never,
};

const refName = (op: OpDecl): string => (op.surface === 'hostRef' ? op.name : `ref${op.name[0].toUpperCase()}${op.name.slice(1)}`);

/** An expression of the table evaluated over the example's scalars (and the arrays built so far). */
function evaluate(op: OpDecl, src: string, vals: Record<string, unknown>): number {
  const scalars = new Map(op.args.filter((a) => a.kind !== 'array').map((a) => [a.name, a.kind as 'int' | 'f32' | 'bool']));
  const arrays = new Map(op.args.map((a, i) => [a, i] as const).filter(([a]) => a.kind === 'array').map(([a, i]) => [a.name, i]));
  const ts = translate(src, { scalars, arrays, consts: CONSTS }, 'ts');
  const names = op.args.map((a) => a.name);
  return new Function('cdiv', 'div', 'finite32', ...names, `return (${ts});`)(cdiv, div, finite32, ...names.map((n) => vals[n])) as number;
}

// A small deterministic generator, so failures reproduce.
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** A valid call of op from its example: scalars as given, arrays of their dims with finite, varied contents. */
function validCall(op: OpDecl, seed = 1): unknown[] {
  const r = rng(seed);
  const vals: Record<string, unknown> = {};
  for (const a of op.args) if (a.kind !== 'array') vals[a.name] = op.example[a.name];
  const order = [...op.args.filter((a): a is ArrayArg => a.kind === 'array' && !(a.dims ?? []).some((d) => d.includes('len('))),
    ...op.args.filter((a): a is ArrayArg => a.kind === 'array' && (a.dims ?? []).some((d) => d.includes('len(')))];
  for (const a of order) {
    if (op.example[a.name] === null) {
      vals[a.name] = null;
      continue;
    }
    const n = a.dims === undefined ? (op.example[a.name] as number) : a.dims.reduce((p, d) => p * evaluate(op, d, vals), 1);
    if (a.type === 'i32') {
      const [lo, hi] = a.range ? a.range.map((x) => evaluate(op, x, vals)) : [0, 1];
      vals[a.name] = Int32Array.from({ length: n }, (_, j) => lo + (j % (hi - lo)));
    } else if (a.type === 'f16') {
      // finite f16 of magnitude 2^-5 .. 2^1, either sign
      vals[a.name] = Uint16Array.from({ length: n }, () => ((r() < 0.5 ? 0x8000 : 0) | ((10 + Math.floor(r() * 7)) << 10) | Math.floor(r() * 1024)));
    } else if (a.type === 'f32') {
      vals[a.name] = Float32Array.from({ length: n }, () => r() * 2 - 1);
    } else {
      vals[a.name] = Uint8Array.from({ length: n }, () => Math.floor(r() * 256));
    }
  }
  return op.args.map((a) => vals[a.name]);
}

/** What a call throws: "TypeError: message", or null. */
function thrown(f: () => unknown): string | null {
  try {
    f();
    return null;
  } catch (e) {
    const err = e as Error;
    return `${err.constructor.name}: ${err.message}`;
  }
}

/** Calls the four readers can be asked: the TS validator (around a raw that returns nothing), the emulation, the hip GPU and ref entries. */
function readers(op: OpDecl): [string, (args: unknown[]) => string | null][] {
  const out: [string, (args: unknown[]) => string | null][] = [];
  const stub = new Proxy({}, { get: () => () => undefined }) as never;
  const ts = VALIDATORS[op.surface](stub);
  out.push(['ts', (args) => thrown(() => ts[op.name](...args))]);
  if (op.surface !== 'hostRef') out.push(['emulation', (args) => thrown(() => emu[op.name](...args))]);
  if (hip !== null && (op.gpu !== undefined || op.hipCustom)) out.push(['hip gpu', (args) => thrown(() => hip[op.name](...args))]);
  if (hip !== null && (op.ref !== undefined || op.hipCustom)) {
    out.push(['hip ref', (args) => thrown(() => hip[refName(op)](...args))?.replace(`: ${refName(op)}: `, `: ${op.name}: `) ?? null]);
  }
  return out;
}

/** Calls that are wrong in one place each: every argument of the wrong kind, lengths off by one, integers out of range, missing arguments. */
function mutations(op: OpDecl): { what: string; args: unknown[] }[] {
  const base = validCall(op);
  const list: { what: string; args: unknown[] }[] = [];
  const set = (i: number, v: unknown, what: string): void => {
    const args = base.slice();
    args[i] = v;
    list.push({ what: `${op.args[i].name} ${what}`, args });
  };
  op.args.forEach((a, i) => {
    set(i, 'x', "as a string");
    set(i, undefined, 'missing');
    if (a.kind === 'int') {
      set(i, a.min - 1, `= ${a.min - 1}`);
      set(i, 2.5, '= 2.5');
      set(i, NaN, '= NaN');
      set(i, 2 ** 31, '= 2^31');
      set(i, (op.example[a.name] as number) + 1, '+ 1');
    } else if (a.kind === 'f32') {
      set(i, Infinity, '= Infinity');
      set(i, -1e-7, '= -1e-7');
      set(i, 3.5e38, '= 3.5e38');
    } else if (a.kind === 'bool') {
      set(i, 1, 'as a number');
      set(i, !(op.example[a.name] as boolean), 'negated');
    } else {
      const v = base[i];
      if (v === null) {
        set(i, new Uint8Array(4), 'given where null');
      } else {
        const arr = v as Uint8Array;
        const Ctor = arr.constructor as new (n: number) => Uint8Array;
        const longer = new Ctor(arr.length + 1);
        longer.set(arr);
        set(i, longer, 'one element longer');
        if (arr.length > 0) set(i, arr.slice(1), 'one element shorter');
        set(i, new ((Ctor as unknown) === Float32Array ? Uint16Array : Float32Array)(arr.length), 'of another element type');
        if (a.nullable) set(i, null, 'null');
        if (a.range !== undefined && arr.length > 0) {
          const bad = (arr as unknown as Int32Array).slice();
          bad[bad.length - 1] = 1 << 20;
          set(i, bad, 'with an element out of range');
        }
      }
    }
  });
  list.push({ what: 'no arguments', args: [] });
  return list;
}

describe('the op table', () => {
  it('the generated files are the table\'s (run npm run gen:ops after editing device-hip/ops/table.ts)', () => {
    for (const [rel, text] of generate()) expect(fs.readFileSync(path.join(root, rel), 'utf8'), rel).toBe(text);
  });

  it('every op of a surface is exported by the emulation addon, and by the hip addon when it has a GPU kernel or a host reference', () => {
    for (const op of OPS) {
      if (op.surface !== 'hostRef') expect(typeof emu[op.name], op.name).toBe('function');
      if (hip === null) continue;
      if (op.gpu !== undefined || op.hipCustom) expect(typeof hip[op.name], op.name).toBe('function');
      if (op.ref !== undefined || op.hipCustom) expect(typeof hip[refName(op)], refName(op)).toBe('function');
    }
  });

  it('the fault count of the table is the numerics\' (FAULT_CODES)', async () => {
    const { FAULT_CODES } = await import('../binding.js');
    expect(Math.max(...Object.values(FAULT_CODES))).toBe(CONSTS.FAULT_MAX);
  });

  for (const op of OPS) {
    it(`${op.name}: all readers accept its example and reach the op; a hip GPU entry refuses only for want of open()`, () => {
      const args = validCall(op);
      for (const [who, call] of readers(op)) {
        const e = call(args);
        if (who === 'hip gpu') expect(e, who).toMatch(/open\(\) the hip backend first/);
        else expect(e, who).toBeNull();
      }
    });

    it(`${op.name}: every reader throws the same error class and message for each wrong argument`, () => {
      let wrong = 0;
      for (const m of mutations(op)) {
        const got = readers(op).map(([who, call]) => [who, call(m.args)] as const);
        const ts = got[0][1];
        if (ts === null) continue;  // the change was still a valid call
        wrong++;
        for (const [who, e] of got.slice(1)) expect(e, `${op.name}, ${m.what}: ${who} vs ts`).toBe(ts);
      }
      expect(wrong).toBeGreaterThan(op.args.length);
    });

    if (op.surface !== 'hostRef' && op.ref !== undefined && hip !== null) {
      it(`${op.name}: the emulation's result equals the host reference's, bit for bit (the call templates pass each argument to its parameter)`, () => {
        for (const seed of [1, 2, 3]) {
          const args = validCall(op, seed);
          const a = emu[op.name](...args);
          const b = hip[refName(op)](...args);
          const bytes = (v: unknown): Uint8Array => {
            const t = v as Uint8Array;
            return new Uint8Array(t.buffer, t.byteOffset, t.byteLength);
          };
          if (op.returns.length === 1) expect(bytes(a)).toEqual(bytes(b));
          else for (const o of op.returns) expect(bytes((a as Record<string, unknown>)[o.name]), o.name).toEqual(bytes((b as Record<string, unknown>)[o.name]));
        }
      });
    }

    if (op.surface !== 'hostRef' && op.returns.some((o) => o.filled)) {
      it(`${op.name}: its outputs marked filled are written in full (the same bits over all-ones memory as over what the allocator held)`, () => {
        const setPoison = emu.setPoisonOutputs as (on: boolean) => boolean;
        const before = setPoison(false);
        try {
          for (const seed of [1, 2]) {
            const args = validCall(op, seed);
            const over = (on: boolean): Uint8Array => {
              setPoison(on);
              const y = (op.returns.length === 1 ? emu[op.name](...args) : (emu[op.name](...args) as Record<string, unknown>)[op.returns.find((o) => o.filled)!.name]) as Uint8Array;
              return new Uint8Array(y.buffer, y.byteOffset, y.byteLength).slice();
            };
            const clean = over(false);
            expect(clean.length).toBeGreaterThan(0);
            expect(over(true), `seed ${seed}`).toEqual(clean);
          }
        } finally {
          setPoison(before);
        }
      });
    }
  }
});
