/**
 * The contract between the runner and the two paths. A path computes one stage at a time; the runner owns
 * the order, the weights (read once per layer, shared by both paths) and the comparison.
 */
import type { LinearWeight } from '../formats/linear.js';
import type { Act } from '../formats/tensor.js';

export interface LayerContext {
  tokens: number[];
  positions: number[];
  /**
   * Discrete choices (MoE expert ids, indexer picks) the reference made at this layer. In isolated mode the
   * device takes them so its error is numeric only (DESIGN §5); null lets the path choose.
   */
  forcedSelections: Selections | null;
  /**
   * The FP16 floor pass only (compare/floor.ts): the reference rounds what the device path stores in FP16
   * between its sublayers — each sublayer's output and the residual stream between them — to FP16, so the
   * pass measures what a device with perfect kernels and FP16 storage makes. Absent: plain FP32.
   */
  fp16Storage?: boolean;
}

/** Per selection kind (e.g. 'experts'), one chosen index set per token, sorted ascending. */
export type Selections = Record<string, number[][]>;

export interface LayerResult {
  out: Act;
  selections: Selections | null;
  /** named intermediate outputs for drill-down (layer.L.attn, layer.L.moe, …), when the path records them */
  substages?: Record<string, Act>;
  /**
   * Per selection kind chosen by score (not hash layers): the scores this path computed, [S, n], and the bias
   * added to them for selection only (DeepSeek-V4's gate.bias; null: none). The runner judges flips with them
   * (compare/flips.ts): the device reports its own scores, unbiased, so a device that drops or rescales the
   * bias is seen selecting against the reference's margins.
   */
  scores?: Record<string, SelectionScores>;
}

export interface SelectionScores {
  scores: Act;
  bias: Float32Array | null;
}

export interface StagePath<LW> {
  embed(tokens: number[]): Act;
  layer(L: number, x: Act, w: LW, ctx: LayerContext): LayerResult;
  finalNorm(x: Act): Act;
  logits(x: Act): Act;
}

/** What the runner needs to know of an architecture. */
export interface ModelDef<LW> {
  architecture: string;
  numLayers: number;
  vocab: number;
  /** read and validate layer L (bytes read once, shared by both paths) */
  loadLayer(L: number): LW;
  /** layers holding FP4/FP8 weights, ascending (global faults show first in the first of them) */
  quantizedLayers(): number[];
  /** check every tensor's name, dtype and shape against the config without reading data (throws InputError) */
  conformance(): void;
  /**
   * the quantized linears layer L stores fused in shared tensors (gpt-oss's experts, registry FUSED_FORMATS),
   * read on call, one per expert: the weights-first check covers them as it covers per-module linears
   */
  fusedLinears?(L: number): LinearWeight[];
  reference: StagePath<LW>;
  device: StagePath<LW>;
}
