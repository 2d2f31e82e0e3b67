/**
 * Mechanism ablations of the DeepSeek-V4 reference: each flag removes exactly one mechanism, in every layer,
 * so a test can show that the mechanism changes the output (a reference missing it would fail the golden
 * check). Test-only: every flag defaults to off, and with all off the reference is the normal forward pass.
 * The semantics mirror scripts/golden/deepseek_v4_numpy.py's ablations (whose logits the golden stores as
 * `ablation.<name>.logits`); `noHca` has no golden counterpart.
 *
 *   windowInf      (window_inf)      every earlier raw kv is a candidate: window start 0 instead of t − window + 1
 *   noCompression  (no_compression)  no compressed candidates in CSA or HCA layers (window only)
 *   noHca          (—)               no compressed candidates in HCA layers (compressor, no indexer); CSA kept
 *   indexerAll     (indexer_all)     CSA layers attend to every visible compressed block (no indexer top-k)
 *   noSink         (no_sink)         attn_sink dropped from the softmax denominator (a plain softmax)
 *   scoreRouting   (score_routing)   hash layers route by top-k of the gate scores instead of tid2eid
 *                                    (hash layers have no gate.bias, so the unbiased scores)
 *   noClamp        (no_clamp)        no swiglu_limit clamp in the routed experts (the shared expert has none);
 *                                    passed on as limit 0, which ops.swiglu reads as "no clamp"
 *
 * Reported selections follow what the layer computed: under `indexerAll` the indexer selection is every
 * visible block; under `noCompression` the indexer still reports its picks, which are then not attended.
 * Forced selections (isolated mode) take precedence over `indexerAll` and `scoreRouting`.
 */
export interface DeepseekV4Ablations {
  windowInf?: boolean;
  noCompression?: boolean;
  noHca?: boolean;
  indexerAll?: boolean;
  noSink?: boolean;
  scoreRouting?: boolean;
  noClamp?: boolean;
}

export const NO_ABLATIONS: Readonly<DeepseekV4Ablations> = Object.freeze({});
