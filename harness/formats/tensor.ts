/** An activation as both paths hand it to the comparison: float32 data, row-major, with its shape. */
export interface Act {
  shape: number[];
  data: Float32Array;
}

export function act(shape: number[], data: Float32Array): Act {
  let n = 1;
  for (const d of shape) n *= d;
  if (n !== data.length) throw new Error(`activation shape ${JSON.stringify(shape)} holds ${n} values, data has ${data.length}`);
  return { shape, data };
}
