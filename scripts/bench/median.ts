/** The benchmarks' one summary of repeated timings: the middle value (the upper middle of an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}
