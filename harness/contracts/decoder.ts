/**
 * What the generation loop needs of a forward pass: start a batch of sequences, then extend them one token
 * at a time. Implementations: device-hip/llama_decode.ts (FP16 weights + KV cache, the optimized path),
 * device-hip/deepseek_v4_decode.ts (DeepSeek-V4's optimized path: window ring, compressor states and entries),
 * reference-cpu/llama_decode.ts (FP32 + KV cache) and harness/generate/recompute.ts (full recompute over
 * any StagePath: the oracle, and DeepSeek-V4's reference generation).
 */
export interface Decoder {
  readonly vocab: number;
  /**
   * Forget any previous batch and start one sequence per prompt, each with room for `capacity` tokens in
   * all (prompt + generated). Returns each prompt's next-token logits (FP32, [vocab]).
   */
  prefill(prompts: readonly (readonly number[])[], capacity: number): Float32Array[];
  /** Append tokens[i] to sequence seqs[i] (indices into the prefilled batch); returns their next-token logits. */
  step(seqs: readonly number[], tokens: readonly number[]): Float32Array[];
}
