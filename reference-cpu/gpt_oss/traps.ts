/**
 * The traps of ../shared/spec/gpt-oss.md §4, each as a flag that puts the wrong implementation back, in
 * every layer, so a test can show that the reference depends on getting it right (a reference with the trap
 * would miss the golden). Test-only: every flag defaults to off, and with all off the reference is the
 * normal forward pass. Names mirror scripts/golden/gpt_oss_numpy.py's `ablation.<name>.logits`.
 *
 *   halves          (halves)           gate = first I rows of gate_up, up = last I (instead of even/odd rows)
 *   noSink          (no_sink)          the sink dropped from the softmax denominator
 *   sinkScaled      (sink_scaled)      the sink logit multiplied by 1/√d like the scores
 *   noWindow        (no_window)        sliding layers attend to every earlier key
 *   windowAll       (window_all)       full layers get the sliding window too
 *   noConcentration (no_concentration) YaRN's inv_freq kept, cos/sin not multiplied by 0.1·ln(factor) + 1
 *   softmaxAll      (softmax_all)      expert weights: softmax over all E logits, taken at the top-k
 *   noRouterBias    (no_router_bias)   router logits without mlp.router.bias
 *   noAttnBias      (no_attn_bias)     q/k/v/o without their biases
 *   noExpertBias    (no_expert_bias)   gate_up and down without their biases
 *   noGateClamp     (no_gate_clamp)    gate not clamped above at swiglu_limit
 *   noUpClamp       (no_up_clamp)      up not clamped to ±swiglu_limit
 *   noPlusOne       (no_plus_one)      (up + 1) replaced by up
 *   alphaOne        (alpha_one)        σ(gate) instead of σ(1.702·gate)
 *
 * Left out on purpose: clamping the gate from below too. Below −7, gate·σ(1.702·gate) is under 5e-5 in
 * magnitude, so that mistake is invisible at any tolerance a float32 reference can be held to.
 */
export interface GptOssTraps {
  halves?: boolean;
  noSink?: boolean;
  sinkScaled?: boolean;
  noWindow?: boolean;
  windowAll?: boolean;
  noConcentration?: boolean;
  softmaxAll?: boolean;
  noRouterBias?: boolean;
  noAttnBias?: boolean;
  noExpertBias?: boolean;
  noGateClamp?: boolean;
  noUpClamp?: boolean;
  noPlusOne?: boolean;
  alphaOne?: boolean;
}

/** flag → the golden's ablation name */
export const TRAP_NAMES: Record<keyof GptOssTraps, string> = {
  halves: 'halves',
  noSink: 'no_sink',
  sinkScaled: 'sink_scaled',
  noWindow: 'no_window',
  windowAll: 'window_all',
  noConcentration: 'no_concentration',
  softmaxAll: 'softmax_all',
  noRouterBias: 'no_router_bias',
  noAttnBias: 'no_attn_bias',
  noExpertBias: 'no_expert_bias',
  noGateClamp: 'no_gate_clamp',
  noUpClamp: 'no_up_clamp',
  noPlusOne: 'no_plus_one',
  alphaOne: 'alpha_one',
};
