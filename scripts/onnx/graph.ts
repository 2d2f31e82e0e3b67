/**
 * Small ONNX graphs built from TypeScript and run on onnxruntime-node's CPU execution provider: the
 * independent side of the reference's operator tests, and the CPU throughput anchor for benchmarks.
 *
 *   const bytes = buildModel({
 *     inputs: [{ name: 'x', shape: ['rows', 64] }],
 *     outputs: [{ name: 'y' }],
 *     initializers: [f32('w', [32, 64], w)],
 *     nodes: [{ op: 'Gemm', inputs: ['x', 'w'], outputs: ['y'], attrs: { transB: { i: 1 } } }],
 *   });
 *   const { y } = await runGraph(bytes, { x: { data: x, dims: [rows, 64] } });
 *
 * Initializers are stored as little-endian raw_data (every platform ORT ships for is little-endian).
 * A ModelProto is a protobuf message, so one model holds at most 2 GiB of weights.
 */
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import * as ort from 'onnxruntime-node';

// onnx-proto is a CommonJS bundle that assigns `module.exports` at run time, so Node's ESM loader
// cannot see its named exports; the default import is the whole `module.exports`.
const { onnx } = onnxProto;

export type DType = 'float32' | 'int64' | 'int32';
export type TypedData = Float32Array | BigInt64Array | Int32Array;

const ELEM_TYPE: Record<DType, OnnxTypes.TensorProto.DataType> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
  int32: onnx.TensorProto.DataType.INT32,
};

/** A graph input or output. `shape` entries are sizes or symbolic names; omit it for an unknown shape. */
export interface ValueSpec {
  name: string;
  dtype?: DType; // default float32
  shape?: (number | string)[];
}

/** A constant tensor stored in the model. */
export interface Initializer {
  name: string;
  dims: number[];
  data: TypedData;
}

/** One attribute value; the key says its ONNX type, so an integer-valued float is never mistaken. */
export type AttrValue =
  | { i: number }
  | { f: number }
  | { s: string }
  | { ints: number[] }
  | { floats: number[] }
  | { t: Initializer };

export interface NodeSpec {
  op: string;
  inputs: string[]; // '' marks an omitted optional input
  outputs: string[];
  attrs?: Record<string, AttrValue>;
  name?: string;
  domain?: string; // default: the standard 'ai.onnx' domain
}

export interface GraphSpec {
  nodes: NodeSpec[];
  inputs: ValueSpec[];
  outputs: ValueSpec[];
  initializers?: Initializer[];
  opset?: number; // default 17 (ReduceMean still takes `axes` as an attribute)
  name?: string;
}

export const DEFAULT_OPSET = 17;

/** float32 initializer. */
export function f32(name: string, dims: number[], data: ArrayLike<number>): Initializer {
  const arr = data instanceof Float32Array ? data : Float32Array.from(data);
  checkSize(name, dims, arr.length);
  return { name, dims, data: arr };
}

/** int64 initializer (Slice starts/ends/axes, Reshape shapes, …). */
export function i64(name: string, dims: number[], data: ArrayLike<number>): Initializer {
  const arr = BigInt64Array.from(Array.from(data, (v) => BigInt(v)));
  checkSize(name, dims, arr.length);
  return { name, dims, data: arr };
}

function checkSize(name: string, dims: number[], length: number): void {
  const n = dims.reduce((a, b) => a * b, 1);
  if (n !== length) throw new RangeError(`initializer '${name}': dims [${dims.join(', ')}] hold ${n} values, data has ${length}`);
}

function dtypeOf(data: TypedData): DType {
  if (data instanceof Float32Array) return 'float32';
  if (data instanceof BigInt64Array) return 'int64';
  return 'int32';
}

function tensorProto(init: Initializer): OnnxTypes.ITensorProto {
  const { data } = init;
  return {
    name: init.name,
    dims: init.dims,
    dataType: ELEM_TYPE[dtypeOf(data)],
    rawData: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  };
}

function valueInfo(v: ValueSpec): OnnxTypes.IValueInfoProto {
  const tensorType: OnnxTypes.TypeProto.ITensor = { elemType: ELEM_TYPE[v.dtype ?? 'float32'] };
  if (v.shape) tensorType.shape = { dim: v.shape.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) };
  return { name: v.name, type: { tensorType } };
}

function attribute(name: string, v: AttrValue): OnnxTypes.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if ('i' in v) return { name, type: T.INT, i: v.i };
  if ('f' in v) return { name, type: T.FLOAT, f: v.f };
  if ('s' in v) return { name, type: T.STRING, s: new TextEncoder().encode(v.s) };
  if ('ints' in v) return { name, type: T.INTS, ints: v.ints };
  if ('floats' in v) return { name, type: T.FLOATS, floats: v.floats };
  return { name, type: T.TENSOR, t: tensorProto(v.t) };
}

/** IR version that goes with an opset (onnx/docs/Versioning.md); ORT rejects a model whose IR is too old. */
function irVersionFor(opset: number): number {
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  return 11;
}

/** Serialize a graph to ModelProto bytes. Node and value names are checked for dangling references. */
export function buildModel(spec: GraphSpec): Uint8Array {
  const opset = spec.opset ?? DEFAULT_OPSET;
  const known = new Set<string>(['']);
  for (const v of spec.inputs) known.add(v.name);
  for (const t of spec.initializers ?? []) known.add(t.name);
  spec.nodes.forEach((n, idx) => {
    for (const input of n.inputs) {
      if (!known.has(input)) throw new Error(`node ${idx} (${n.op}): input '${input}' is not a graph input, initializer or earlier output`);
    }
    for (const out of n.outputs) known.add(out);
  });
  for (const v of spec.outputs) {
    if (!known.has(v.name)) throw new Error(`graph output '${v.name}' is produced by no node`);
  }

  const model = onnx.ModelProto.create({
    irVersion: irVersionFor(opset),
    producerName: 'layerdiff',
    opsetImport: [{ domain: '', version: opset }],
    graph: {
      name: spec.name ?? 'layerdiff',
      node: spec.nodes.map((n, idx) => ({
        name: n.name ?? `${n.op}_${idx}`,
        opType: n.op,
        domain: n.domain ?? '',
        input: n.inputs,
        output: n.outputs,
        attribute: Object.entries(n.attrs ?? {}).map(([k, v]) => attribute(k, v)),
      })),
      input: spec.inputs.map(valueInfo),
      output: spec.outputs.map((v) => valueInfo({ dtype: 'float32', ...v })),
      initializer: (spec.initializers ?? []).map(tensorProto),
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

/** A tensor crossing the ORT boundary. */
export interface HostTensor<T extends TypedData = TypedData> {
  data: T;
  dims: number[];
}

export type SessionOptions = ort.InferenceSession.SessionOptions;

/** Two intra-op threads: the CI machine's two cores. */
export const DEFAULT_SESSION_OPTIONS: SessionOptions = { intraOpNumThreads: 2, executionProviders: ['cpu'] };

/** Open a session once to run it many times (benchmarks); call `session.release()` when done. */
export function createSession(bytes: Uint8Array, options: SessionOptions = {}): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(bytes, { ...DEFAULT_SESSION_OPTIONS, ...options });
}

function toOrt(name: string, t: HostTensor): ort.Tensor {
  checkSize(name, t.dims, t.data.length);
  return new ort.Tensor(dtypeOf(t.data), t.data, t.dims);
}

/** Run an open session; outputs come back as host tensors (float32 outputs as Float32Array). */
export async function runSession(session: ort.InferenceSession, feeds: Record<string, HostTensor>): Promise<Record<string, HostTensor>> {
  const ortFeeds: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(feeds)) ortFeeds[name] = toOrt(name, t);
  const results = await session.run(ortFeeds);
  const out: Record<string, HostTensor> = {};
  for (const [name, t] of Object.entries(results)) {
    out[name] = { data: t.data as TypedData, dims: [...t.dims] };
  }
  return out;
}

/** Build a session, run it once, release it. */
export async function runGraph(bytes: Uint8Array, feeds: Record<string, HostTensor>, options: SessionOptions = {}): Promise<Record<string, HostTensor>> {
  const session = await createSession(bytes, options);
  try {
    return await runSession(session, feeds);
  } finally {
    await session.release();
  }
}

/**
 * y = x·Wᵀ with W [outDim, inDim] stored in the model (Gemm transB=1), rows symbolic: the shape of the
 * reference's `matmul`, for benchmarks and tests. Input 'x' [rows, inDim], output 'y' [rows, outDim].
 */
export function linearModel(w: Float32Array, outDim: number, inDim: number): Uint8Array {
  return buildModel({
    name: `linear_${outDim}x${inDim}`,
    inputs: [{ name: 'x', shape: ['rows', inDim] }],
    outputs: [{ name: 'y', shape: ['rows', outDim] }],
    initializers: [f32('w', [outDim, inDim], w)],
    nodes: [{ op: 'Gemm', inputs: ['x', 'w'], outputs: ['y'], attrs: { transB: { i: 1 } } }],
  });
}

/**
 * Builds a GraphSpec one node at a time, naming intermediate values and constants itself:
 *
 *   const g = new GraphBuilder();
 *   const x = g.input('x', [rows, dim]);
 *   const y = g.node('Softmax', [x], { axis: { i: -1 } });
 *   g.output(y, 'y');
 *   const bytes = g.build();
 */
export class GraphBuilder {
  readonly spec: Required<Omit<GraphSpec, 'name'>> & { name?: string };
  private counter = 0;

  constructor(opset = DEFAULT_OPSET, name?: string) {
    this.spec = { nodes: [], inputs: [], outputs: [], initializers: [], opset, name };
  }

  private fresh(prefix: string): string {
    return `${prefix}_${this.counter++}`;
  }

  input(name: string, shape: (number | string)[], dtype: DType = 'float32'): string {
    this.spec.inputs.push({ name, shape, dtype });
    return name;
  }

  /** Make `value` a graph output called `name` (an Identity node renames it if needed). */
  output(value: string, name = value, shape?: (number | string)[]): void {
    if (value !== name) this.spec.nodes.push({ op: 'Identity', inputs: [value], outputs: [name] });
    this.spec.outputs.push({ name, shape });
  }

  /** A float32 constant; a scalar when `dims` is omitted. */
  f32(data: ArrayLike<number> | number, dims?: number[]): string {
    const values = typeof data === 'number' ? [data] : data;
    const name = this.fresh('c');
    this.spec.initializers.push(f32(name, dims ?? (typeof data === 'number' ? [] : [values.length]), values));
    return name;
  }

  /** An int64 constant (1-D unless `dims` says otherwise): Slice bounds, Reshape shapes, axes. */
  i64(data: ArrayLike<number>, dims?: number[]): string {
    const name = this.fresh('c');
    this.spec.initializers.push(i64(name, dims ?? [data.length], data));
    return name;
  }

  /** Append a node with one output and return that output's name. */
  node(op: string, inputs: string[], attrs?: Record<string, AttrValue>): string {
    return this.nodeN(op, inputs, 1, attrs)[0];
  }

  /** Append a node with `n` outputs and return their names. */
  nodeN(op: string, inputs: string[], n: number, attrs?: Record<string, AttrValue>): string[] {
    const outputs = Array.from({ length: n }, () => this.fresh(op.toLowerCase()));
    this.spec.nodes.push({ op, inputs, outputs, attrs });
    return outputs;
  }

  /** x[..., start:end, ...] along one axis (Slice with constant bounds). */
  slice(x: string, axis: number, start: number, end: number): string {
    return this.node('Slice', [x, this.i64([start]), this.i64([end]), this.i64([axis])]);
  }

  build(): Uint8Array {
    return buildModel(this.spec);
  }
}
