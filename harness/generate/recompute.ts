/**
 * Generation by full recompute: every step runs the whole sequence through a StagePath (embed → every
 * layer → final_norm → logits, last position only). No cache of any kind, so it is the plain meaning of
 * "the model's next-token distribution": the oracle the cached decoders are tested against, and the
 * reference generation of architectures without a cached decoder (DeepSeek-V4).
 */
import { act, type Act } from '../formats/tensor.js';
import type { StagePath } from '../models/path.js';
import type { Decoder } from '../contracts/decoder.js';

export interface RecomputeModel<LW> {
  numLayers: number;
  vocab: number;
  loadLayer(L: number): LW;
}

export class RecomputeDecoder<LW> implements Decoder {
  readonly vocab: number;
  private seqs: number[][] = [];
  /** layer weights kept across steps (bytes read once) unless the caller asks to re-read them each step */
  private readonly kept = new Map<number, LW>();

  constructor(
    private readonly model: RecomputeModel<LW>,
    private readonly path: StagePath<LW>,
    private readonly keepLayers = true,
  ) {
    this.vocab = model.vocab;
  }

  prefill(prompts: readonly (readonly number[])[], _capacity: number): Float32Array[] {
    if (prompts.length === 0 || prompts.some((p) => p.length === 0)) throw new Error('prefill needs at least one non-empty prompt');
    this.seqs = prompts.map((p) => [...p]);
    return this.seqs.map((s) => this.forward(s));
  }

  step(seqs: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (seqs.length !== tokens.length) throw new Error(`step: ${seqs.length} sequences but ${tokens.length} tokens`);
    seqs.forEach((s, i) => this.seqs[s].push(tokens[i]));
    return seqs.map((s) => this.forward(this.seqs[s]));
  }

  private layer(L: number): LW {
    const have = this.kept.get(L);
    if (have !== undefined) return have;
    const w = this.model.loadLayer(L);
    if (this.keepLayers) this.kept.set(L, w);
    return w;
  }

  /** Next-token logits after `tokens` (all positions through the layers, the last one through the head). */
  forward(tokens: readonly number[]): Float32Array {
    const toks = [...tokens];
    const positions = toks.map((_, i) => i);
    let x: Act = this.path.embed(toks);
    for (let L = 0; L < this.model.numLayers; L++) {
      x = this.path.layer(L, x, this.layer(L), { tokens: toks, positions, forcedSelections: null }).out;
    }
    const row = x.data.length / x.shape[0];
    const last = act([1, ...x.shape.slice(1)], x.data.slice((x.shape[0] - 1) * row));
    return this.path.logits(this.path.finalNorm(last)).data;
  }
}
