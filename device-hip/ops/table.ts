/**
 * The op table: one declaration per device op. From it `npm run gen:ops` (device-hip/ops/generate.ts) writes
 *   - the typed surfaces and their argument validators (ops/surfaces.generated.ts, re-exported by binding.ts),
 *   - the C++ argument readers and output allocation both addons use (src/ops_args.generated.h),
 *   - the emulation addon's registration (src/ops_register.generated.h),
 *   - the hip addon's GPU and host-reference entry points (hip/ops_hip.generated.inc),
 * so an op's arguments, their checks and their error messages are written once, here, and the three readers
 * cannot drift apart (device-hip/test/op_table.test.ts holds the generated files equal to a fresh generation and
 * every reader's messages equal, argument by argument).
 *
 * Expressions (`dims`, `checks`, call templates) are a small language both TypeScript and C++ read the same way:
 * integers, the op's argument names, + - * / % ?: == != < <= > >= && || !, and the functions cdiv (⌈a/b⌉),
 * div (⌊a/b⌋), len(array), isnull(array), finite32(number). `${expr}` in a message interpolates a value.
 * Order of checks, the same in every reader: the scalars in argument order, then `checks`, then the arrays in
 * argument order (type, length, element range), then `each` checks over array elements.
 */

export type ArrayType = 'u8' | 'f16' | 'f32' | 'i32';

export interface ArrayArg {
  name: string;
  kind: 'array';
  type: ArrayType;
  /** the element count as a product of dimensions; absent: any length */
  dims?: string[];
  /** the shape's name in messages (default: the dims joined by ×) */
  label?: string;
  /** null (or undefined) accepted; the readers then give an empty span */
  nullable?: boolean;
  /** every element in [lo, hi) */
  range?: [string, string];
}

export interface IntArg {
  name: string;
  kind: 'int';
  min: number;
}

export interface NumArg {
  name: string;
  kind: 'f32';
}

export interface BoolArg {
  name: string;
  kind: 'bool';
}

export type Arg = ArrayArg | IntArg | NumArg | BoolArg;

export interface Check {
  /** must hold */
  expr: string;
  message: string;
  /** TypeError instead of RangeError */
  type?: boolean;
}

/** A check over the elements of arrays: for each index `index` in [0, count), expr must hold. */
export interface EachCheck {
  index: string;
  count: string;
  expr: string;
  message: string;
}

export interface Output {
  name: string;
  type: ArrayType;
  dims: string[];
  doc?: string;
  /**
   * every element is written by the op on every backend (a dequantization's rows, a GEMM's [m, n]): the output is
   * allocated without zero-filling it. Zeroing a 16 MiB expert before decoding into it cost more than the decode
   * (measured); a kernel that skipped an element would show it under setPoisonOutputs (tested).
   */
  filled?: true;
}

export type Surface = 'device' | 'decode' | 'deepseek' | 'gptOss' | 'hostRef';

export interface OpDecl {
  name: string;
  surface: Surface;
  doc: string;
  args: Arg[];
  checks?: Check[];
  each?: EachCheck[];
  /** one output: the op returns it; several: an object of them, typed by `result` */
  returns: Output[];
  result?: { name: string; doc: string };
  /**
   * The hip addon's call of the GPU kernel (a `Backend` method) and of the host reference (`ldref::`), with the
   * op's argument names, its outputs by name (written into) and literals; absent: not on that side. `ref` ops of
   * the hostRef surface exist only as host reference.
   */
  gpu?: string;
  ref?: string;
  /**
   * The GPU kernel's launch, from which the Backend method is generated (hip/backend_ops.generated.*): its
   * argument struct and launch plan (kernels/ld_kernel_args.h) and each field of the struct as an expression
   * (arrays and outputs are their device buffers, null where the host array is). An op with `kernel` needs
   * no `gpu` call: the hip addon calls the generated Backend::<op>.
   */
  kernel?: { args: string; plan: string; init: Record<string, string> };
  /** the hip addon entry is written by hand in addon_hip.cc (it needs host-side preparation) */
  hipCustom?: boolean;
  /** a valid call's scalars and free array lengths, for the tests (null: pass null) */
  example: Record<string, number | boolean | null>;
}

/** Constants the expressions may name (the C++ side asserts they equal ld_numerics.h's). */
export const CONSTS = { FAULT_MAX: 11 } as const;

const int = (name: string, min: number): IntArg => ({ name, kind: 'int', min });
const f32 = (name: string): NumArg => ({ name, kind: 'f32' });
const bool = (name: string): BoolArg => ({ name, kind: 'bool' });
const arr = (name: string, type: ArrayType, dims?: string[], more: Partial<ArrayArg> = {}): ArrayArg => ({ name, kind: 'array', type, ...(dims ? { dims } : {}), ...more });
const out = (name: string, type: ArrayType, dims: string[], doc?: string): Output => ({ name, type, dims, ...(doc ? { doc } : {}) });
const filled = (o: Output): Output => ({ ...o, filled: true });

const FAULT_CHECK: Check = { expr: 'fault <= FAULT_MAX', message: 'fault must be 0..${FAULT_MAX}, got ${fault}' };

/** The arguments every top-k router takes: logits [T, E], an optional bias [E], optional forced picks [T, topk]. */
const routerChecks: Check[] = [{ expr: 'topk <= E', message: 'topk ${topk} exceeds E ${E}' }];

export const OPS: OpDecl[] = [
  // ---- DeviceNative: the runner's ops -------------------------------------------------------------------
  {
    name: 'dequantToF16',
    surface: 'device',
    doc: `A stored weight [out, in] → f16 bits [out·in]. kind 0 mxfp4 (weight packed [out, in/2], scale E8M0
[out, in/32], block [1, 32]); 1 fp8-block (weight E4M3 [out, in], scale [⌈out/blockOut⌉, ⌈in/blockIn⌉]
as E8M0 bytes or, with scaleIsF32, little-endian f32 bytes); 2/3/4 bf16/f16/f32 bytes (scale null).
fault: 0 or a FAULT_CODES value; a fault that does not apply to the format is a no-op.`,
    args: [int('kind', 0), arr('weight', 'u8', ['kind == 0 ? div(out * inDim, 2) : kind == 1 ? out * inDim : out * inDim * (kind == 4 ? 4 : 2)'], { label: 'weight bytes' }),
      arr('scale', 'u8', ['kind == 0 ? div(out * inDim, 32) : cdiv(out, blockOut) * cdiv(inDim, blockIn) * (scaleIsF32 ? 4 : 1)'], { label: 'scale bytes', nullable: true }),
      bool('scaleIsF32'), int('out', 1), int('inDim', 1), int('blockOut', 1), int('blockIn', 1), int('fault', 0)],
    checks: [
      { expr: 'kind <= 4', message: 'kind must be 0..4 (mxfp4, fp8-block, bf16, f16, f32), got ${kind}' },
      FAULT_CHECK,
      { expr: 'kind != 0 || inDim % 32 == 0', message: 'mxfp4 weight [${out}×${inDim}]: in must be a multiple of 32' },
      { expr: 'kind != 0 || (blockOut == 1 && blockIn == 32)', message: 'mxfp4 block must be [1, 32], got [${blockOut}, ${blockIn}]' },
      { expr: 'kind != 0 || (!isnull(scale) && !scaleIsF32)', message: 'mxfp4 weight [${out}×${inDim}] needs E8M0 scale bytes (scaleIsF32 false)', type: true },
      { expr: 'kind != 1 || !isnull(scale)', message: 'fp8-block weight [${out}×${inDim}] needs a scale', type: true },
      { expr: 'kind <= 1 || isnull(scale)', message: 'plain weight [${out}×${inDim}] takes no scale (pass null)', type: true },
    ],
    returns: [filled(out('y', 'f16', ['out', 'inDim']))],
    gpu: 'dequant(kind, weight, len(weight), scale, len(scale), scaleIsF32, out, inDim, blockOut, blockIn, fault, y)',
    ref: 'dequant(kind, weight, scale, scaleIsF32, out, inDim, blockOut, blockIn, fault, y)',
    example: { kind: 0, out: 2, inDim: 64, blockOut: 1, blockIn: 32, fault: 0, scaleIsF32: false },
  },
  {
    name: 'dequantNvfp4ToF16',
    surface: 'device',
    doc: `An NVFP4 weight [out, in] → f16 bits: packed [out, in/2] low-even, E4M3 scales [out, in/16], and the
tensor's f32 global scale, a multiplier or (globalIsDivisor) a divisor. fault as for dequantToF16.`,
    args: [arr('weight', 'u8', ['out', 'div(inDim, 2)'], { label: 'packed' }), arr('scale', 'u8', ['out', 'div(inDim, 16)'], { label: 'E4M3' }),
      int('out', 1), int('inDim', 1), f32('globalScale'), bool('globalIsDivisor'), int('fault', 0)],
    checks: [
      FAULT_CHECK,
      { expr: 'inDim % 16 == 0', message: 'nvfp4 weight [${out}×${inDim}]: in must be a multiple of 16' },
      { expr: 'globalScale > 0 && finite32(globalScale)', message: 'globalScale must be a finite positive f32, got ${globalScale}' },
    ],
    returns: [filled(out('y', 'f16', ['out', 'inDim']))],
    kernel: { args: 'LdDequantNvfp4Args', plan: 'ld_plan_dequant_nvfp4', init: { w: 'weight', scale: 'scale', y: 'y', out: 'out', in: 'inDim', divisor: 'globalIsDivisor ? 1 : 0', fault: 'fault', global: 'globalScale' } },
    ref: 'dequant_nvfp4(weight, scale, out, inDim, globalScale, globalIsDivisor, fault, y)',
    example: { out: 2, inDim: 32, globalScale: 0.5, globalIsDivisor: false, fault: 0 },
  },
  {
    name: 'dequantBnb4ToF16',
    surface: 'device',
    doc: `A bitsandbytes 4-bit weight [out, in] → f16 bits [out·in]: codes over the flattened tensor, two a byte
high-even, blocks of \`blocksize\`; absmax as F32 bytes or (absmaxIsCodes, double quant) U8 codes decoded
by nestedQuantMap [256] · nestedAbsmax[⌊b/nestedBlocksize⌋] + nestedOffset (both empty without).`,
    args: [arr('weight', 'u8', ['cdiv(out * inDim, 2)'], { label: 'packed (out·in+1)/2' }),
      arr('absmax', 'u8', ['(absmaxIsCodes ? 1 : 4) * cdiv(out * inDim, blocksize)'], { label: 'absmax bytes (1 a code or 4 an F32)·⌈out·in/blocksize⌉' }),
      bool('absmaxIsCodes'), arr('quantMap', 'f32', ['16']),
      arr('nestedAbsmax', 'f32', ['absmaxIsCodes ? cdiv(cdiv(out * inDim, blocksize), nestedBlocksize) : 0'], { label: '⌈nblocks/nestedBlocksize⌉ (0 without double quant)' }),
      arr('nestedQuantMap', 'f32', ['absmaxIsCodes ? 256 : 0'], { label: '256 (0 without double quant)' }),
      f32('nestedOffset'), int('nestedBlocksize', 1), int('out', 1), int('inDim', 1), int('blocksize', 1), int('fault', 0)],
    checks: [FAULT_CHECK],
    returns: [filled(out('y', 'f16', ['out', 'inDim']))],
    kernel: { args: 'LdDequantBnb4Args', plan: 'ld_plan_dequant_bnb4', init: { w: 'weight', absmax: 'absmax', quant_map: 'quantMap', nested_absmax: 'absmaxIsCodes ? nestedAbsmax : nullptr', nested_map: 'absmaxIsCodes ? nestedQuantMap : nullptr', y: 'y', n: 'len(y)', blocksize: 'blocksize', absmax_is_codes: 'absmaxIsCodes ? 1 : 0', nested_blocksize: 'nestedBlocksize', fault: 'fault', nested_offset: 'nestedOffset' } },
    ref: 'dequant_bnb4(weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, out * inDim, blocksize, fault, y)',
    example: { absmaxIsCodes: false, nestedOffset: 0, nestedBlocksize: 256, out: 2, inDim: 64, blocksize: 64, fault: 0 },
  },
  {
    name: 'gemmF16',
    surface: 'device',
    doc: 'y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ), FP32 accumulation in the ld lane order.',
    args: [arr('x', 'f16', ['m', 'k']), arr('w', 'f16', ['n', 'k']), int('m', 1), int('k', 1), int('n', 1), f32('alpha')],
    returns: [filled(out('y', 'f16', ['m', 'n']))],
    gpu: 'gemm(x, w, nullptr, nullptr, m, k, n, alpha, 0, y, nullptr)',
    ref: 'gemm(x, w, nullptr, nullptr, m, k, n, alpha, 0, y, nullptr)',
    example: { m: 2, k: 8, n: 3, alpha: 1 },
  },
  {
    name: 'gemmMxfp4F16',
    surface: 'device',
    doc: `The fused MXFP4 GEMM: y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ) with W dequantized inside the product, rows of
packed [n, k/2] (low nibble = even k) and E8M0 scales [n, k/32], fault as for dequantToF16. The same bits as
gemmF16(x, dequantToF16(0, packed, scale, …)) without the f16 copy of W (a routed expert's would be 16 MiB).`,
    args: [arr('x', 'f16', ['m', 'k']), arr('packed', 'u8', ['n', 'div(k, 2)'], { label: 'n×k/2' }), arr('scale', 'u8', ['n', 'div(k, 32)'], { label: 'n×k/32' }),
      int('m', 1), int('k', 32), int('n', 1), f32('alpha'), int('fault', 0)],
    checks: [{ expr: 'k % 32 == 0', message: 'mxfp4 weight [${n}×${k}]: k must be a multiple of 32' }, FAULT_CHECK],
    returns: [filled(out('y', 'f16', ['m', 'n']))],
    gpu: 'gemm(x, nullptr, packed, scale, m, k, n, alpha, fault, y, nullptr)',
    ref: 'gemm(x, nullptr, packed, scale, m, k, n, alpha, fault, y, nullptr)',
    example: { m: 2, k: 64, n: 3, alpha: 1, fault: 0 },
  },
  {
    name: 'gemmFp8F16',
    surface: 'device',
    doc: `The fused FP8-block GEMM: y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ) with W dequantized inside the product, E4M3
bytes [n, k] and scales [⌈n/blockOut⌉, ⌈k/blockIn⌉] as E8M0 bytes or, with scaleIsF32, little-endian f32, fault
as for dequantToF16. The same bits as gemmF16(x, dequantToF16(1, weight, scale, …)); a decode step reads a byte a
weight instead of the f16 copy's two.`,
    args: [arr('x', 'f16', ['m', 'k']), arr('weight', 'u8', ['n', 'k']),
      arr('scale', 'u8', ['cdiv(n, blockOut) * cdiv(k, blockIn) * (scaleIsF32 ? 4 : 1)'], { label: 'scale bytes' }),
      bool('scaleIsF32'), int('m', 1), int('k', 1), int('n', 1), int('blockOut', 1), int('blockIn', 1), f32('alpha'), int('fault', 0)],
    checks: [FAULT_CHECK],
    returns: [filled(out('y', 'f16', ['m', 'n']))],
    gpu: 'gemm_fp8(x, weight, scale, len(scale), scaleIsF32, m, k, n, blockOut, blockIn, alpha, fault, y)',
    ref: 'gemm_fp8(x, weight, scale, scaleIsF32, m, k, n, blockOut, blockIn, alpha, fault, y)',
    example: { scaleIsF32: false, m: 2, k: 8, n: 3, blockOut: 2, blockIn: 4, alpha: 1, fault: 0 },
  },
  {
    name: 'gemmNvfp4F16',
    surface: 'device',
    doc: `The fused NVFP4 GEMM: y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ) with W dequantized inside the product, as
dequantNvfp4ToF16 lays it out: packed [n, k/2] low-even, E4M3 scales [n, k/16], the f32 global scale a multiplier or
(globalIsDivisor) a divisor, fault as for dequantToF16. The same bits as gemmF16(x, dequantNvfp4ToF16(W)); the
emulation decodes a unit of rows at a time and writes no f16 copy of W, the GPU writes one to device memory for the call.`,
    args: [arr('x', 'f16', ['m', 'k']), arr('weight', 'u8', ['n', 'div(k, 2)'], { label: 'packed' }), arr('scale', 'u8', ['n', 'div(k, 16)'], { label: 'E4M3' }),
      int('m', 1), int('k', 16), int('n', 1), f32('globalScale'), bool('globalIsDivisor'), f32('alpha'), int('fault', 0)],
    checks: [
      FAULT_CHECK,
      { expr: 'k % 16 == 0', message: 'nvfp4 weight [${n}×${k}]: k must be a multiple of 16' },
      { expr: 'globalScale > 0 && finite32(globalScale)', message: 'globalScale must be a finite positive f32, got ${globalScale}' },
    ],
    returns: [filled(out('y', 'f16', ['m', 'n']))],
    gpu: 'gemm_nvfp4(x, weight, scale, m, k, n, globalScale, globalIsDivisor, alpha, fault, y)',
    ref: 'gemm_nvfp4(x, weight, scale, m, k, n, globalScale, globalIsDivisor, alpha, fault, y)',
    example: { m: 2, k: 32, n: 3, globalScale: 0.5, globalIsDivisor: false, alpha: 1, fault: 0 },
  },
  {
    name: 'gemmBnb4F16',
    surface: 'device',
    doc: `The fused bitsandbytes 4-bit GEMM: y[m, n] = f16(alpha · x[m, k]·W[n, k]ᵀ) with W dequantized inside the
product, as dequantBnb4ToF16 lays it out (its arguments, with k = in and n = out), for a weight whose rows hold whole
blocks of an even size (k a multiple of blocksize: every bitsandbytes checkpoint's linears). The same bits as
gemmF16(x, dequantBnb4ToF16(W)); the emulation writes no f16 copy of W, the GPU one to device memory for the call.`,
    args: [arr('x', 'f16', ['m', 'k']), arr('weight', 'u8', ['div(n * k, 2)'], { label: 'packed n·k/2' }),
      arr('absmax', 'u8', ['(absmaxIsCodes ? 1 : 4) * cdiv(n * k, blocksize)'], { label: 'absmax bytes (1 a code or 4 an F32)·n·k/blocksize' }),
      bool('absmaxIsCodes'), arr('quantMap', 'f32', ['16']),
      arr('nestedAbsmax', 'f32', ['absmaxIsCodes ? cdiv(cdiv(n * k, blocksize), nestedBlocksize) : 0'], { label: '⌈nblocks/nestedBlocksize⌉ (0 without double quant)' }),
      arr('nestedQuantMap', 'f32', ['absmaxIsCodes ? 256 : 0'], { label: '256 (0 without double quant)' }),
      f32('nestedOffset'), int('nestedBlocksize', 1), int('m', 1), int('k', 1), int('n', 1), int('blocksize', 2), f32('alpha'), int('fault', 0)],
    checks: [
      FAULT_CHECK,
      { expr: 'blocksize % 2 == 0 && k % blocksize == 0', message: 'bnb4 weight [${n}×${k}]: rows must hold whole blocks of an even size, blocksize ${blocksize}' },
    ],
    returns: [filled(out('y', 'f16', ['m', 'n']))],
    gpu: 'gemm_bnb4(x, weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, m, k, n, blocksize, alpha, fault, y)',
    ref: 'gemm_bnb4(x, weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, m, k, n, blocksize, alpha, fault, y)',
    example: { absmaxIsCodes: false, nestedOffset: 0, nestedBlocksize: 256, m: 2, k: 64, n: 3, blocksize: 64, alpha: 1, fault: 0 },
  },
  {
    name: 'gemmF16F32',
    surface: 'device',
    doc: 'The same product with FP32 output (logits, routers).',
    args: [arr('x', 'f16', ['m', 'k']), arr('w', 'f16', ['n', 'k']), int('m', 1), int('k', 1), int('n', 1)],
    returns: [filled(out('y', 'f32', ['m', 'n']))],
    gpu: 'gemm(x, w, nullptr, nullptr, m, k, n, 1.0f, 0, nullptr, y)',
    ref: 'gemm(x, w, nullptr, nullptr, m, k, n, 1.0f, 0, nullptr, y)',
    example: { m: 2, k: 8, n: 3 },
  },
  {
    name: 'rmsnormF16',
    surface: 'device',
    doc: 'y = f16((x·r)·w) per row, r = 1/sqrt(mean(x²) + eps).',
    args: [arr('x', 'f16', ['rows', 'dim']), arr('w', 'f16', ['dim']), int('rows', 1), int('dim', 1), f32('eps')],
    returns: [out('y', 'f16', ['rows', 'dim'])],
    kernel: { args: 'LdRmsnormArgs', plan: 'ld_plan_rmsnorm', init: { x: 'x', w: 'w', y: 'y', rows: 'rows', dim: 'dim', eps: 'eps' } },
    ref: 'rmsnorm(x, w, rows, dim, eps, y)',
    example: { rows: 2, dim: 8, eps: 1e-6 },
  },
  {
    name: 'ropeF16',
    surface: 'device',
    doc: 'Rotates dims [rotOffset, rotOffset+rotDim) of each head; cos/sin [tokens, rotDim/2]. Returns a new array.',
    args: [arr('x', 'f16', ['tokens', 'heads', 'headDim']), arr('cos', 'f32', ['tokens', 'div(rotDim, 2)'], { label: 'tokens×rotDim/2' }),
      arr('sin', 'f32', ['tokens', 'div(rotDim, 2)'], { label: 'tokens×rotDim/2' }),
      int('tokens', 1), int('heads', 1), int('headDim', 1), int('rotOffset', 0), int('rotDim', 2), bool('interleaved')],
    checks: [{ expr: 'rotDim % 2 == 0 && rotOffset + rotDim <= headDim', message: 'rotOffset ${rotOffset} + rotDim ${rotDim} must fit in headDim ${headDim} with rotDim even' }],
    returns: [out('y', 'f16', ['tokens', 'heads', 'headDim'])],
    kernel: { args: 'LdRopeArgs', plan: 'ld_plan_rope', init: { x: 'x', cos: 'cos', sin: 'sin', y: 'y', tokens: 'tokens', heads: 'heads', head_dim: 'headDim', rot_offset: 'rotOffset', rot_dim: 'rotDim', interleaved: 'interleaved ? 1 : 0' } },
    ref: 'rope(x, cos, sin, tokens, heads, headDim, rotOffset, rotDim, interleaved, y)',
    example: { tokens: 2, heads: 2, headDim: 8, rotOffset: 0, rotDim: 8, interleaved: false },
  },
  {
    name: 'attentionF16',
    surface: 'device',
    doc: 'Causal GQA attention; window 0 = unlimited, else key s visible iff t−window < s ≤ t; sinks [Hq] logits or null.',
    args: [arr('q', 'f16', ['T', 'Hq', 'D']), arr('k', 'f16', ['T', 'Hkv', 'D']), arr('v', 'f16', ['T', 'Hkv', 'Dv']),
      int('T', 1), int('Hq', 1), int('Hkv', 1), int('D', 1), int('Dv', 1), f32('scale'), int('window', 0), arr('sinks', 'f32', ['Hq'], { nullable: true })],
    checks: [{ expr: 'Hq % Hkv == 0', message: 'Hq ${Hq} is not a multiple of Hkv ${Hkv}' }],
    returns: [out('y', 'f16', ['T', 'Hq', 'Dv'])],
    kernel: { args: 'LdAttentionArgs', plan: 'ld_plan_attention', init: { q: 'q', k: 'k', v: 'v', sinks: 'sinks', y: 'y', T: 'T', Hq: 'Hq', Hkv: 'Hkv', D: 'D', Dv: 'Dv', window: 'window', scale: 'scale' } },
    ref: 'attention(q, k, v, sinks, T, Hq, Hkv, D, Dv, scale, window, y)',
    example: { T: 3, Hq: 4, Hkv: 2, D: 8, Dv: 8, scale: 0.35, window: 0 },
  },
  {
    name: 'swigluF16',
    surface: 'device',
    doc: 'f16(silu(g)·u), with g ≤ limit and |u| ≤ limit when limit > 0.',
    args: [arr('gate', 'f16'), arr('up', 'f16', ['len(gate)'], { label: "gate's length" }), f32('limit')],
    returns: [out('y', 'f16', ['len(gate)'])],
    kernel: { args: 'LdSwigluArgs', plan: 'ld_plan_swiglu', init: { g: 'gate', u: 'up', y: 'y', n: 'len(gate)', limit: 'limit' } },
    ref: 'swiglu(gate, up, len(gate), limit, y)',
    example: { gate: 6, limit: 0 },
  },
  {
    name: 'addF16',
    surface: 'device',
    doc: 'f16(a + b), elementwise.',
    args: [arr('a', 'f16'), arr('b', 'f16', ['len(a)'], { label: "a's length" })],
    returns: [out('y', 'f16', ['len(a)'])],
    kernel: { args: 'LdAddArgs', plan: 'ld_plan_add', init: { a: 'a', b: 'b', y: 'y', n: 'len(a)' } },
    ref: 'add(a, b, len(a), y)',
    example: { a: 6 },
  },
  {
    name: 'mulScalarF16',
    surface: 'device',
    doc: 'f16(a · s), elementwise.',
    args: [arr('a', 'f16'), f32('s')],
    returns: [out('y', 'f16', ['len(a)'])],
    kernel: { args: 'LdMulScalarArgs', plan: 'ld_plan_mul_scalar', init: { a: 'a', y: 'y', n: 'len(a)', s: 's' } },
    ref: 'mul_scalar(a, len(a), s, y)',
    example: { a: 6, s: 0.5 },
  },
  // The conversions are exact host-side work (the hip backend takes the emulation's).
  { name: 'f32ToF16', surface: 'device', doc: 'f32 → f16 bits, round to nearest even.', args: [arr('x', 'f32')], returns: [out('y', 'f16', ['len(x)'])], example: { x: 4 } },
  { name: 'f16ToF32', surface: 'device', doc: 'f16 bits → f32 (exact).', args: [arr('x', 'f16')], returns: [out('y', 'f32', ['len(x)'])], example: { x: 4 } },
  { name: 'bf16ToF16', surface: 'device', doc: 'bf16 bits → f16 bits, round to nearest even.', args: [arr('x', 'f16')], returns: [out('y', 'f16', ['len(x)'])], example: { x: 4 } },

  // ---- DecodeNative ---------------------------------------------------------------------------------------
  {
    name: 'attentionDecodeF16',
    surface: 'decode',
    doc: `Attention of B query groups of Tq new queries each over a KV cache of Bc sequences × cap slots
(slot s mod cap holds position s: a ring when window + Tq − 1 ≤ cap < the sequence). Group b reads cache sequence
slot[b]; its query t sits at position start[b] + t and sees slots max(0, p − window + 1) … p (window 0: 0 … p).
q [B, Tq, Hq, D], k [Bc, cap, Hkv, D], v [Bc, cap, Hkv, Dv] → [B, Tq, Hq, Dv], same numerics as attentionF16.`,
    args: [arr('q', 'f16', ['B', 'Tq', 'Hq', 'D']), arr('k', 'f16', ['Bc', 'cap', 'Hkv', 'D']), arr('v', 'f16', ['Bc', 'cap', 'Hkv', 'Dv']),
      int('B', 1), int('Tq', 1), int('Bc', 1), int('cap', 1), arr('slot', 'i32', ['B']), arr('start', 'i32', ['B']),
      int('Hq', 1), int('Hkv', 1), int('D', 1), int('Dv', 1), f32('scale'), int('window', 0), arr('sinks', 'f32', ['Hq'], { nullable: true })],
    checks: [{ expr: 'Hq % Hkv == 0', message: 'Hq ${Hq} is not a multiple of Hkv ${Hkv}' }],
    each: [
      { index: 'b', count: 'B', expr: 'slot[b] >= 0 && slot[b] < Bc', message: "slot[${b}] = ${slot[b]} is outside the cache's ${Bc} sequences" },
      // positions past cap wrap (a ring) only when every key a query sees is still held: window + Tq − 1 ≤ cap
      { index: 'b', count: 'B', expr: 'start[b] >= 0 && (start[b] + Tq <= cap || (window > 0 && window + Tq - 1 <= cap))',
        message: 'start[${b}] = ${start[b]} + Tq ${Tq} does not fit the cache capacity ${cap} (a ring needs window + Tq − 1 ≤ cap)' },
    ],
    returns: [out('y', 'f16', ['B', 'Tq', 'Hq', 'Dv'])],
    gpu: 'attention_decode(q, k, v, slot, start, sinks, B, Tq, Bc, cap, Hq, Hkv, D, Dv, scale, window, y)',
    ref: 'attention_decode(q, k, v, slot, start, sinks, B, Tq, cap, Hq, Hkv, D, Dv, scale, window, y)',
    example: { B: 1, Tq: 2, Bc: 1, cap: 4, Hq: 2, Hkv: 1, D: 8, Dv: 8, scale: 0.35, window: 0 },
  },

  // ---- DeepseekNative: shapes T tokens, hc streams of width D; index lists Int32 (−1 = empty slot) -----------
  {
    name: 'hcPreF16',
    surface: 'deepseek',
    doc: 'hc_pre (§4.3): x f16 [T, hc, D]; fn f32 [(2+hc)·hc, hc·D]; base f32 [(2+hc)·hc]; scale f32 [3].',
    args: [arr('x', 'f16', ['T', 'hc', 'D']), arr('fn', 'f32', ['(2 + hc) * hc', 'hc * D'], { label: '(2+hc)·hc×hc·D' }), arr('base', 'f32', ['(2 + hc) * hc'], { label: '(2+hc)·hc' }),
      arr('scale', 'f32', ['3']), int('T', 1), int('hc', 1), int('D', 1), f32('normEps'), f32('hcEps'), int('iters', 1)],
    checks: [{ expr: 'hc * D <= 2147483647', message: 'hc·D ${hc * D} exceeds 2^31 − 1' }],
    returns: [out('u', 'f16', ['T', 'D'], 'f16 [T, D]: Σ_j pre_j·X_j'), out('post', 'f32', ['T', 'hc'], 'f32 [T, hc]: 2σ(·)'),
      out('comb', 'f32', ['T', 'hc', 'hc'], 'f32 [T, hc, hc]: C[t][j][k] (X\'_k = post_k·F + Σ_j C_jk·X_j)')],
    result: { name: 'HcPreResult', doc: "hcPreF16's three outputs: the sublayer input, the post weights and the Sinkhorn-normalized combination." },
    kernel: { args: 'LdHcArgs', plan: 'ld_plan_hc_pre', init: { x: 'x', fn: 'fn', base: 'base', scale: 'scale', u: 'u', post: 'post', comb: 'comb', T: 'T', hc: 'hc', D: 'D', iters: 'iters', norm_eps: 'normEps', hc_eps: 'hcEps' } },
    ref: 'hc_pre_head(false, x, fn, base, scale, T, hc, D, normEps, hcEps, iters, u, post, comb)',
    example: { T: 2, hc: 2, D: 8, normEps: 1e-6, hcEps: 1e-6, iters: 3 },
  },
  {
    name: 'hcPostF16',
    surface: 'deepseek',
    doc: 'hc_post (§4.3): f16(post_k·f + Σ_j C_jk·X_j) → f16 [T, hc, D].',
    args: [arr('f', 'f16', ['T', 'D']), arr('x', 'f16', ['T', 'hc', 'D']), arr('post', 'f32', ['T', 'hc']), arr('comb', 'f32', ['T', 'hc', 'hc']), int('T', 1), int('hc', 1), int('D', 1)],
    returns: [out('y', 'f16', ['T', 'hc', 'D'])],
    kernel: { args: 'LdHcPostArgs', plan: 'ld_plan_hc_post', init: { f: 'f', x: 'x', post: 'post', comb: 'comb', y: 'y', T: 'T', hc: 'hc', D: 'D' } },
    ref: 'hc_post(f, x, post, comb, T, hc, D, y)',
    example: { T: 2, hc: 2, D: 8 },
  },
  {
    name: 'hcHeadF16',
    surface: 'deepseek',
    doc: 'hc_head (§4.7): fn f32 [hc, hc·D], base f32 [hc], scale f32 [1] → f16 [T, D].',
    args: [arr('x', 'f16', ['T', 'hc', 'D']), arr('fn', 'f32', ['hc', 'hc * D'], { label: 'hc×hc·D' }), arr('base', 'f32', ['hc']), arr('scale', 'f32', ['1']),
      int('T', 1), int('hc', 1), int('D', 1), f32('normEps'), f32('hcEps')],
    checks: [{ expr: 'hc * D <= 2147483647', message: 'hc·D ${hc * D} exceeds 2^31 − 1' }],
    returns: [out('u', 'f16', ['T', 'D'])],
    kernel: { args: 'LdHcArgs', plan: 'ld_plan_hc_head', init: { x: 'x', fn: 'fn', base: 'base', scale: 'scale', u: 'u', post: 'nullptr', comb: 'nullptr', T: 'T', hc: 'hc', D: 'D', iters: '0', norm_eps: 'normEps', hc_eps: 'hcEps' } },
    ref: 'hc_pre_head(true, x, fn, base, scale, T, hc, D, normEps, hcEps, 0, u, nullptr, nullptr)',
    example: { T: 2, hc: 2, D: 8, normEps: 1e-6, hcEps: 1e-6 },
  },
  {
    name: 'compressPoolF16',
    surface: 'deepseek',
    doc: "The compressor's gated pooling (§4.5 step 3): K, Z f32 [T, c·dc], ape f32 [ratio, c·dc], c = 2 iff overlap → f16 [⌊T/ratio⌋, dc].",
    args: [arr('K', 'f32', ['T', '(overlap ? 2 : 1) * dc'], { label: 'T×c·dc' }), arr('Z', 'f32', ['T', '(overlap ? 2 : 1) * dc'], { label: 'T×c·dc' }),
      arr('ape', 'f32', ['ratio', '(overlap ? 2 : 1) * dc'], { label: 'ratio×c·dc' }), int('T', 1), int('ratio', 1), int('dc', 1), bool('overlap')],
    returns: [out('y', 'f16', ['div(T, ratio)', 'dc'])],
    kernel: { args: 'LdCompressPoolArgs', plan: 'ld_plan_compress_pool', init: { K: 'K', Z: 'Z', ape: 'ape', y: 'y', T: 'T', ratio: 'ratio', dc: 'dc', overlap: 'overlap ? 1 : 0' } },
    ref: 'compress_pool(K, Z, ape, T, ratio, dc, overlap, y)',
    example: { T: 4, ratio: 2, dc: 8, overlap: true },
  },
  {
    name: 'indexerTopkF16',
    surface: 'deepseek',
    doc: `Indexer scores and top-k (§4.5 step 6): q f16 [T, nh, hd], w f16 [T, nh] (unscaled), e f16 [B, hd]. Row t is
the query at absolute position t0 + t and sees blocks b < ⌊(t0+t+1)/ratio⌋; a row's result depends only on
its own q, w and position, so rows t0.. of a longer call equal a call with those rows alone and this t0
(a decode step scores its one query without rows 0..t0−1).`,
    args: [arr('q', 'f16', ['T', 'nh', 'hd']), arr('w', 'f16', ['T', 'nh']), arr('e', 'f16', ['B', 'hd']),
      int('T', 1), int('nh', 1), int('hd', 1), int('B', 0), int('ratio', 1), int('t0', 0), int('topk', 1), f32('scale')],
    returns: [out('scores', 'f32', ['T', 'B'], 'f32 [T, B]; blocks not yet visible to row t (b ≥ ⌊(t0+t+1)/ratio⌋) hold −∞'),
      out('picks', 'i32', ['T', 'topk'], '[T, topk]: the chosen blocks ascending, then −1')],
    result: { name: 'IndexerTopkResult', doc: 'indexerTopkF16: every block score and the picks.' },
    kernel: { args: 'LdIndexerArgs', plan: 'ld_plan_indexer_topk', init: { q: 'q', w: 'w', e: 'e', scores: 'scores', picks: 'picks', T: 'T', nh: 'nh', hd: 'hd', B: 'B', ratio: 'ratio', t0: 't0', topk: 'topk', scale: 'scale' } },
    ref: 'indexer_topk(q, w, e, T, nh, hd, B, ratio, t0, topk, scale, scores, picks)',
    example: { T: 4, nh: 2, hd: 8, B: 2, ratio: 2, t0: 0, topk: 1, scale: 0.5 },
  },
  {
    name: 'sparseAttentionF16',
    surface: 'deepseek',
    doc: `Attention with a sink over explicit candidates (§4.5 steps 4–5): q f16 [T, H, D]; one K=V head: raw rows
kv f16 [T, D] (token t sees s in [max(0, t−window+1), t]; window 0 = all s ≤ t) and compressed rows
comp f16 [B, D] listed per token in cand [T, K] (−1 = none); sinks f32 [H] → f16 [T, H, D].
Causality of cand is the caller's: the kernel checks only that each entry is −1 or a row of comp.`,
    args: [arr('q', 'f16', ['T', 'H', 'D']), arr('kv', 'f16', ['T', 'D']), arr('comp', 'f16', ['B', 'D']),
      int('T', 1), int('H', 1), int('D', 1), int('B', 0), int('window', 0), arr('cand', 'i32', ['T', 'K'], { range: ['-1', 'B'] }), int('K', 0),
      arr('sinks', 'f32', ['H']), f32('scale')],
    returns: [out('y', 'f16', ['T', 'H', 'D'])],
    kernel: { args: 'LdSparseAttnArgs', plan: 'ld_plan_sparse_attention', init: { q: 'q', kv: 'kv', comp: 'comp', cand: 'cand', sinks: 'sinks', y: 'y', T: 'T', H: 'H', D: 'D', B: 'B', window: 'window', K: 'K', scale: 'scale' } },
    ref: 'sparse_attention(q, kv, comp, cand, sinks, T, H, D, window, K, scale, y)',
    example: { T: 2, H: 2, D: 8, B: 1, window: 0, K: 1, scale: 0.35 },
  },
  {
    name: 'routerF32',
    surface: 'deepseek',
    doc: 'Router (§4.6 steps 1–3): logits f32 [T, E]; bias f32 [E] for selection only; given [T, topk] ids replace the choice.',
    args: [arr('logits', 'f32', ['T', 'E']), arr('bias', 'f32', ['E'], { nullable: true }), int('T', 1), int('E', 1), int('topk', 1), f32('routeScale'),
      arr('given', 'i32', ['T', 'topk'], { nullable: true, range: ['0', 'E'] })],
    checks: routerChecks,
    returns: [out('ids', 'i32', ['T', 'topk'], '[T, topk] expert ids, ascending per token'), out('weights', 'f32', ['T', 'topk'], 'f32 [T, topk]: routeScale·s_i / Σ s, aligned with ids'),
      out('scores', 'f32', ['T', 'E'], 'f32 [T, E]: s = sqrt(softplus(logit))')],
    result: { name: 'RouterResult', doc: "DeepSeek-V4's router: the chosen experts, their weights and every score." },
    kernel: { args: 'LdRouterArgs', plan: 'ld_plan_router', init: { logits: 'logits', bias: 'bias', given: 'given', ids: 'ids', weights: 'weights', scores: 'scores', T: 'T', E: 'E', topk: 'topk', route_scale: 'routeScale' } },
    ref: 'router(logits, bias, given, T, E, topk, routeScale, ids, weights, scores)',
    example: { T: 2, E: 4, topk: 2, routeScale: 1.5 },
  },
  {
    name: 'swigluRowsF16',
    surface: 'deepseek',
    doc: 'f16(swiglu(g, u, limit)·rowWeights[r]) over [rows, cols]; rowWeights null = 1 (then bit-identical to swigluF16).',
    args: [arr('gate', 'f16', ['rows', 'cols']), arr('up', 'f16', ['rows', 'cols']), int('rows', 1), int('cols', 1), arr('rowWeights', 'f32', ['rows'], { nullable: true }), f32('limit')],
    returns: [out('y', 'f16', ['rows', 'cols'])],
    kernel: { args: 'LdSwigluRowsArgs', plan: 'ld_plan_swiglu_rows', init: { g: 'gate', u: 'up', rw: 'rowWeights', y: 'y', rows: 'rows', cols: 'cols', limit: 'limit' } },
    ref: 'swiglu_rows(gate, up, rowWeights, rows, cols, limit, y)',
    example: { rows: 2, cols: 8, limit: 10 },
  },
  {
    name: 'moeCombineF16',
    surface: 'deepseek',
    doc: 'Per token: f16(Σ routed rows y[r] with rowToken[r] = t, in increasing r, then + shared[t]), all in f32.',
    args: [arr('y', 'f16', ['len(rowToken)', 'D'], { label: 'R×D' }), arr('rowToken', 'i32', undefined, { range: ['0', 'T'] }), arr('shared', 'f16', ['T', 'D']), int('T', 1), int('D', 1)],
    returns: [out('out', 'f16', ['T', 'D'])],
    hipCustom: true,
    example: { rowToken: 3, T: 2, D: 8 },
  },

  // ---- GptOssNative ---------------------------------------------------------------------------------------
  {
    name: 'ossRouterF32',
    surface: 'gptOss',
    doc: 'logits f32 [T, E] (gemmF16F32), bias f32 [E] or null; given Int32 [T, topk] ids replace the choice.',
    args: [arr('logits', 'f32', ['T', 'E']), arr('bias', 'f32', ['E'], { nullable: true }), int('T', 1), int('E', 1), int('topk', 1),
      arr('given', 'i32', ['T', 'topk'], { nullable: true, range: ['0', 'E'] })],
    checks: routerChecks,
    returns: [out('ids', 'i32', ['T', 'topk'], 'Int32 [T, topk]: chosen experts, ascending per token'),
      out('weights', 'f32', ['T', 'topk'], 'f32 [T, topk]: softmax over the chosen biased logits, in the order of ids')],
    result: { name: 'OssRouterResult', doc: "gpt-oss's router: the chosen experts and their weights." },
    kernel: { args: 'LdOssRouterArgs', plan: 'ld_plan_oss_router', init: { logits: 'logits', bias: 'bias', given: 'given', ids: 'ids', weights: 'weights', T: 'T', E: 'E', topk: 'topk' } },
    ref: 'oss_router(logits, bias, given, T, E, topk, ids, weights)',
    example: { T: 2, E: 4, topk: 2 },
  },
  {
    name: 'ossSwigluF16',
    surface: 'gptOss',
    doc: 'h f16 [rows, 2I] (gate = even, up = odd elements) → f16 [rows, I]: min(g, L)·σ(α·min(g, L))·(clamp(u, ±L) + 1).',
    args: [arr('h', 'f16', ['rows', '2 * I'], { label: 'rows×2I' }), int('rows', 1), int('I', 1), f32('limit'), f32('alpha')],
    returns: [out('y', 'f16', ['rows', 'I'])],
    kernel: { args: 'LdOssSwigluArgs', plan: 'ld_plan_oss_swiglu', init: { h: 'h', y: 'y', rows: 'rows', I: 'I', limit: 'limit', alpha: 'alpha' } },
    ref: 'oss_swiglu(h, rows, I, limit, alpha, y)',
    example: { rows: 2, I: 4, limit: 7, alpha: 1.702 },
  },

  // ---- host reference only (ld_host_ref.h): the device check's expected values of kernels without an op ----
  {
    name: 'refSoftmaxF16',
    surface: 'hostRef',
    doc: 'row softmax as the attention kernels do it, P = f16(e/l); z f32 [rows, n], sinks f32 [rows] or null',
    args: [arr('z', 'f32', ['rows', 'n']), arr('sinks', 'f32', ['rows'], { nullable: true }), int('rows', 1), int('n', 1)],
    returns: [out('y', 'f16', ['rows', 'n'])],
    ref: 'softmax(z, sinks, rows, n, y)',
    example: { rows: 2, n: 5 },
  },
  {
    name: 'refMoeGatherF16',
    surface: 'hostRef',
    doc: 'y[r] = x[token[r]]',
    args: [arr('x', 'f16', ['T', 'D']), arr('token', 'i32', undefined, { range: ['0', 'T'] }), int('T', 1), int('D', 1)],
    returns: [out('y', 'f16', ['len(token)', 'D'])],
    ref: 'moe_gather(x, token, len(token), D, y)',
    example: { token: 3, T: 2, D: 8 },
  },
  {
    name: 'refSinkhornF32',
    surface: 'hostRef',
    doc: 'ld_sinkhorn_f32 per token: A f32 [T, hc, hc]',
    args: [arr('A', 'f32', ['T', 'hc', 'hc']), int('T', 1), int('hc', 1), int('iters', 1), f32('eps')],
    returns: [out('C', 'f32', ['T', 'hc', 'hc'])],
    ref: 'sinkhorn(A, T, hc, iters, eps, C)',
    example: { T: 2, hc: 2, iters: 3, eps: 1e-6 },
  },
];
