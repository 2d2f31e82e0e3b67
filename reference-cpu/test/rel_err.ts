import { expect } from 'vitest';

/** max |a − b| / max |b|: the error relative to the reference's largest magnitude (same lengths asserted). */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  let ref = 0;
  for (let i = 0; i < a.length; i++) {
    m = Math.max(m, Math.abs(a[i] - b[i]));
    ref = Math.max(ref, Math.abs(b[i]));
  }
  return m / Math.max(ref, 1e-30);
}

/** ‖a − b‖₂ / ‖b‖₂ */
export function relL2(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / den);
}
