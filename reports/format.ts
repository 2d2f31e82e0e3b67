/** Number formatting shared by the printers: three significant digits, exponent form for small values. */
export function sci(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  if (!Number.isFinite(x)) return String(x);
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 1e-2 && a < 1e4 ? x.toPrecision(3) : x.toExponential(2);
}

export function cos(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  return x.toFixed(6);
}
