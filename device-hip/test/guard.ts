/** Guard bytes around kernel outputs and inputs: a write past either end, or into an input, shows. */

type Guardable = Uint8Array | Uint16Array | Int32Array | Float32Array;

/** A copy of `a` as a view inside a larger buffer of guard values; `intact()` says the guards and the copy are unchanged. */
export function guarded<T extends Guardable>(a: T, pad = 11): { view: T; intact: () => boolean } {
  const Ctor = a.constructor as { new (n: number): T };
  const big = new Ctor(a.length + 2 * pad);
  // values no kernel writes by accident: an odd float, a negative index, 0xa5 bytes, an f16 NaN-free pattern
  const g = a instanceof Float32Array ? -12345.5 : a instanceof Int32Array ? -777 : a instanceof Uint8Array ? 0xa5 : 0x7e5a;
  big.fill(g);
  big.set(a, pad);
  const view = big.subarray(pad, pad + a.length) as T;
  return {
    view,
    intact: () => {
      for (let i = 0; i < pad; i++) if (big[i] !== g || big[big.length - 1 - i] !== g) return false;
      for (let i = 0; i < a.length; i++) if (!Object.is(view[i], a[i])) return false;
      return true;
    },
  };
}
