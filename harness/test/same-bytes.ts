/**
 * Bit-for-bit equality of two typed arrays in one memcmp: what "bit-identical" means in these tests (NaN payloads
 * and signed zeros included, which toEqual's value comparison would blur), and fast on megabytes, where toEqual
 * walks element by element for seconds.
 */
export const sameBytes = (a: ArrayBufferView, b: ArrayBufferView): boolean =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
