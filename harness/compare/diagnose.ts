/**
 * Name the cause, not just the layer (DESIGN §9). Two sources of evidence, in this order:
 *
 * 1. Weights (harness/weights/check.ts): a device FP16 weight that differs from the reference's exact
 *    dequantization is a decode bug by construction, and the catalog reading that reproduces the device's
 *    weights bit for bit names it. This is decided before any activation is looked at, so drift, overflow
 *    or a lucky threshold cannot blur it.
 * 2. Activations, at the first failing stage (isolated mode decides: a stage that fails on the reference's
 *    own input has a bug of its own): new Inf/NaN → fp16-overflow when an Inf is there (the device's FP16
 *    range ran out; NaN follows from Inf − Inf or 0 · Inf downstream); a max_abs failure smaller than two
 *    FP16 ulps at the stage's largest |r| → fp16-resolution (the threshold, not the device, is wrong);
 *    failing only in accumulated mode → selection-flip when a top-k choice (MoE experts, indexer blocks) went
 *    another way than the reference's at this stage or before (DESIGN §5: a near-tie flipped by FP16 drift, not
 *    a kernel bug), else drift; anything else → "unknown", with the evidence seen.
 */
import type { RunResult, StageResult } from '../runner/run.js';
import type { TensorCheck, WeightsReport } from '../weights/check.js';
import { READING_TEXT, WEIGHT_CAUSES, type WeightCause } from '../weights/decode.js';
import type { StageMetrics } from './metrics.js';
import { floorRatio, newNonFinite, type Policy } from './policy.js';

export const CAUSES = [
  ...WEIGHT_CAUSES,
  'fp16-overflow',
  'fp16-accumulate',
  'rope-angle-fp16',
  'router-bias-dropped',
  'scoring-bug',
  'fp16-resolution',
  'selection-flip',
  'unknown',
] as const;
export type Cause = (typeof CAUSES)[number];

export interface Diagnosis {
  stage: string;
  cause: Cause;
  evidence: string;
  /** where the evidence came from */
  source: 'weights' | 'activations';
  /** the quantized tensors a weights diagnosis covers (the first MAX_NAMED; tensor_count has them all) */
  tensors?: string[];
  tensor_count?: number;
  /** the first failing sub-stage of the stage, from the drill-down */
  substage?: string;
  /** what to do next, when there is something obvious */
  hint?: string;
}

/** FP16 has 10 fraction bits: spacing 2^(⌊log2 |x|⌋−10) for normal |x|, 2^−24 below 2^−14. */
export function f16Ulp(x: number): number {
  const a = Math.abs(x);
  if (!(a >= 2 ** -14)) return 2 ** -24;
  return 2 ** (Math.floor(Math.log2(a)) - 10);
}

export const FP16_MAX = 65504;

/** A global bug in a 43-layer MoE checkpoint touches tens of thousands of tensors: name the first few hundred. */
const MAX_NAMED = 200;

const fmt = (x: number) => (Number.isFinite(x) ? (Math.abs(x) >= 1e-3 && Math.abs(x) < 1e5 ? Number(x.toPrecision(3)).toString() : x.toExponential(2)) : String(x));

export function diagnose(run: RunResult, policy: Policy, weights: WeightsReport | null = null): Diagnosis[] {
  const out = weights !== null ? diagnoseWeights(weights, run) : [];
  const first = run.stages.find((s) => s.name === run.first_failure);
  if (first !== undefined && !out.some((d) => d.stage === first.name)) {
    const weightsClean = weights !== null && weights.mismatched === 0 && weights.checked > 0 ? `; its quantized weights dequantize exactly (${weights.checked} tensors checked)` : '';
    out.push(diagnoseActivations(first, policy, weightsClean, run.stages));
  }
  const order = (d: Diagnosis) => run.stages.findIndex((s) => s.name === d.stage);
  return out.sort((a, b) => order(a) - order(b));
}

function layerStage(L: number): string {
  return `layer.${L}`;
}

/** Group mismatching tensors by the reading that reproduces them; the rest are "unknown". */
export function diagnoseWeights(w: WeightsReport, run: RunResult | null): Diagnosis[] {
  let left = w.tensors.filter((t) => !t.exact && t.nan_codes === 0);
  const out: Diagnosis[] = [];
  const drillOf = (stage: string) => run?.stages.find((s) => s.name === stage)?.drill?.first_failing ?? undefined;
  while (left.length > 0) {
    // the reading that explains the most tensors; ties go to catalog order (and are named in the evidence)
    let best: WeightCause | null = null;
    let bestN = 0;
    for (const c of WEIGHT_CAUSES) {
      const n = left.filter((t) => t.matches.includes(c)).length;
      if (n > bestN) [best, bestN] = [c, n];
    }
    const group = best === null ? left : left.filter((t) => t.matches.includes(best!));
    left = best === null ? [] : left.filter((t) => !t.matches.includes(best!));
    const layers = group.map((t) => t.layer);
    const stage = layerStage(Math.min(...layers));
    const where = `${group.length} of ${w.checked} quantized tensors (${rangeText(layers)})`;
    const ex = exampleText(group[0], best);
    const sub = drillOf(stage);
    if (best === null) {
      out.push({
        stage,
        cause: 'unknown',
        source: 'weights',
        tensors: group.slice(0, MAX_NAMED).map((t) => t.name),
        tensor_count: group.length,
        ...(sub !== undefined ? { substage: sub } : {}),
        evidence: `the device's FP16 weights differ from the reference's exact dequantization in ${where}, and no catalog reading (${WEIGHT_CAUSES.join(', ')}) reproduces them; ${ex}`,
        hint: 'dump the device weights and compare them block by block: the bug is in the dequant kernel, but not one the catalog knows',
      });
      continue;
    }
    const alsoN = WEIGHT_CAUSES.filter((c) => c !== best && group.every((t) => t.matches.includes(c)));
    out.push({
      stage,
      cause: best,
      source: 'weights',
      tensors: group.slice(0, MAX_NAMED).map((t) => t.name),
      tensor_count: group.length,
      ...(sub !== undefined ? { substage: sub } : {}),
      evidence:
        `the device's FP16 weights differ from the reference's exact dequantization in ${where}; ${READING_TEXT[best]} reproduces every one of them bit for bit` +
        `${alsoN.length > 0 ? ` (so does ${alsoN.join(', ')}: these weights cannot tell them apart)` : ''}; ${ex}`,
    });
  }
  return out;
}

function rangeText(layers: number[]): string {
  const u = [...new Set(layers)].sort((a, b) => a - b);
  if (u.length === 1) return `layer ${u[0]}`;
  const contiguous = u.every((x, k) => k === 0 || x === u[k - 1] + 1);
  return contiguous ? `layers ${u[0]}–${u.at(-1)}` : `layers ${u.join(', ')}`;
}

function exampleText(t: TensorCheck, cause: WeightCause | null): string {
  const e = t.example!;
  let ratio = '';
  if (e.scale_byte !== null && e.reference !== 0) {
    const b = e.scale_byte;
    const r = e.device / e.reference;
    if (cause === 'scale-missing') ratio = `; device/reference = ${fmt(r)} = 2^(127−e) with scale byte e = ${b}`;
    else if (cause === 'e8m0-as-int') ratio = `; device/reference = ${fmt(r)} = e/2^(e−127) with scale byte e = ${b}`;
    else ratio = `; device/reference = ${fmt(r)} (scale byte ${b})`;
  }
  return `e.g. ${t.name}: ${t.bad_blocks}/${t.blocks} scale blocks differ, max |Δw| ${fmt(t.max_abs)}; w[${e.at.join(', ')}] is ${fmt(e.device)} on the device, ${fmt(e.reference)} in the reference${ratio}`;
}

function diagnoseActivations(s: StageResult, policy: Policy, weightsClean: string, stages: StageResult[]): Diagnosis {
  const drill = s.drill?.first_failing ?? undefined;
  const sub = drill !== undefined ? { substage: drill } : {};
  const inDrill = drill !== undefined ? `; first failing sub-stage: ${drill}` : '';
  const nonFinite = [s.isolated, s.accumulated].find((m): m is StageMetrics => m !== null && newNonFinite(m));
  const refBad = [s.isolated, s.accumulated].find((m): m is StageMetrics => m !== null && m.nan.reference + m.inf.reference > 0);
  if (nonFinite === undefined && refBad !== undefined) {
    return {
      stage: s.name,
      cause: 'unknown',
      source: 'activations',
      ...sub,
      evidence: `the FP32 reference itself is non-finite here (${refBad.nan.reference} NaN, ${refBad.inf.reference} Inf): the model its config and weights describe overflows FP32, so this stage validates nothing${weightsClean}`,
      hint: "check the config's constants (rope_theta, eps, scaling factors) and the weights' magnitudes",
    };
  }
  if (nonFinite !== undefined) {
    const m = nonFinite;
    const mode = m === s.isolated ? 'isolated' : 'accumulated';
    const subInf = s.drill?.substages.find((x) => x.metrics.inf.device > x.metrics.inf.reference);
    const hasInf = m.inf.device > m.inf.reference || subInf !== undefined;
    const counts = `${m.inf.device} Inf and ${m.nan.device} NaN in the device output (reference: ${m.inf.reference} Inf, ${m.nan.reference} NaN, ${mode} mode)`;
    if (hasInf || m.max_ref >= FP16_MAX / 2) {
      const range =
        m.max_ref >= FP16_MAX
          ? `the reference itself reaches max |r| = ${fmt(m.max_ref)} > ${FP16_MAX}: the model's activations do not fit FP16 here`
          : `the reference stays within max |r| = ${fmt(m.max_ref)} (FP16 limit ${FP16_MAX}), so an intermediate overflowed inside the device computation (e.g. a missing down-scaling before an FP16 store)`;
      return {
        stage: s.name,
        cause: 'fp16-overflow',
        source: 'activations',
        ...sub,
        evidence: `${counts}${subInf ? `; Inf first appears in sub-stage ${subInf.name}` : ''}; ${range}${weightsClean}`,
        hint: m.max_ref >= FP16_MAX ? 'keep this tensor in FP32/BF16 on the device, or rescale it before the FP16 store' : 'check the scaling of the kernel that writes this value in FP16',
      };
    }
    return {
      stage: s.name,
      cause: 'unknown',
      source: 'activations',
      ...sub,
      evidence: `${counts}, with no Inf before the NaN and the reference far from the FP16 limit (max |r| ${fmt(m.max_ref)}): not an overflow${inDrill}${weightsClean}`,
    };
  }
  const bugs = scoringBugDiagnosis(s, weightsClean);
  if (bugs !== null) return bugs;
  const scores = scoreSubstageDiagnosis(s, policy, weightsClean);
  if (scores !== null) return scores;
  const isoFails = s.statuses !== undefined ? s.statuses.isolated === 'fail' : s.isolated !== null && s.isolated[policy.metric] > policy.fail_above;
  if (isoFails && s.floor_ratio !== undefined) {
    const named = floorSignature(s, policy, weightsClean);
    if (named !== null) return named;
  }
  if (!isoFails && s.statuses?.accumulated_forced === 'fail' && s.floor?.accumulated_forced) {
    const m = s.accumulated_forced!;
    const metric = s.judged_by ?? policy.metric;
    return {
      stage: s.name,
      cause: 'unknown',
      source: 'activations',
      evidence: `drift: with the reference's top-k choices (accumulated-forced) ${metric} ${fmt(m[metric])} is ${fmt(s.floor_ratio?.accumulated_forced ?? NaN)}× the FP16 drift budget ${fmt(s.floor.accumulated_forced[metric])}, while on the reference's input (isolated) the stage is within its floor: error grows through depth faster than correct FP16 storage carries it${weightsClean}`,
      hint: 'look for a state kept in FP16 across layers that the reference keeps wider (the residual or hyper-connection streams), or an error small per layer that compounds',
    };
  }
  const m: StageMetrics = (isoFails ? s.isolated : (s.accumulated ?? s.isolated))!;
  const mode = isoFails ? 'isolated' : s.accumulated !== null ? 'accumulated' : 'isolated';
  const twoUlp = 2 * f16Ulp(m.max_ref);
  // under the floor rule a stage above 0.1 within FP16's resolution passes: one that failed did so beyond its floor
  if (policy.rule !== 'floor' && policy.metric === 'max_abs' && m.max_abs <= twoUlp) {
    return {
      stage: s.name,
      cause: 'fp16-resolution',
      source: 'activations',
      ...sub,
      evidence: `${mode} max_abs ${fmt(m.max_abs)} is above --fail-above ${policy.fail_above} but within 2 FP16 ulps (${fmt(twoUlp)}) of the stage's largest value max |r| = ${fmt(m.max_ref)} (rel_l2 ${fmt(m.rel_l2)}): an FP16 path cannot do better at this magnitude${weightsClean}`,
      hint: `an absolute threshold is the wrong tool here: use --metric rel_l2 (this stage: ${fmt(m.rel_l2)}), or a --fail-above above ${fmt(twoUlp)}`,
    };
  }
  if (!isoFails && s.isolated !== null) {
    const upTo = stages.slice(0, stages.indexOf(s) + 1);
    const flipped = upTo.find((x) => (x.accumulated?.selection_flips ?? 0) > 0);
    if (flipped !== undefined) {
      const n = flipped.accumulated!.selection_flips;
      return {
        stage: s.name,
        cause: 'selection-flip',
        source: 'activations',
        evidence: `fails only in accumulated mode (accumulated ${policy.metric} ${fmt(s.accumulated?.[policy.metric] ?? NaN)}, isolated ${fmt(s.isolated[policy.metric])}), and at ${flipped.name} ${n} token${n === 1 ? '' : 's'} chose another top-k set (MoE experts or indexer blocks) than the reference: a near-tie that FP16 drift tipped the other way; on the reference's choices (isolated mode) the stage passes${weightsClean}`,
        hint: 'not a kernel bug: these inputs sit on a top-k near-tie; confirm with --mode isolated --free-selection (flips on its own input mean a scoring bug), and gate on prompts away from ties or judge this stage with --metric rel_l2',
      };
    }
    return {
      stage: s.name,
      cause: 'unknown',
      source: 'activations',
      evidence: `fails only in accumulated mode (accumulated ${policy.metric} ${fmt(s.accumulated?.[policy.metric] ?? NaN)}, isolated ${fmt(s.isolated[policy.metric])}): error carried in from earlier stages — drift, not a bug in this stage${weightsClean}`,
    };
  }
  return {
    stage: s.name,
    cause: 'unknown',
    source: 'activations',
    ...sub,
    evidence: `${mode} ${policy.metric} ${fmt(m[policy.metric])} (max_abs ${fmt(m.max_abs)} at ${JSON.stringify(m.max_at)}, max |r| ${fmt(m.max_ref)}, cosine ${fmt(m.cosine)})${inDrill}; no catalog signature matches${weightsClean}`,
  };
}

/** A scoring-bug flip at this stage: the device chose against margins its score error cannot explain (compare/flips.ts). */
function scoringBugDiagnosis(s: StageResult, weightsClean: string): Diagnosis | null {
  const summaries = [s.flips?.accumulated, s.flips?.isolated].filter((f) => f != null && f.scoring_bug > 0);
  if (summaries.length === 0) return null;
  const f = summaries[0]!;
  const bugs = f.list.filter((x) => x.judgement === 'scoring-bug');
  const ex = bugs[0];
  const kind = ex?.kind ?? 'experts';
  const substage = `${s.name}.${kind === 'indexer' ? 'attn.indexer' : 'moe.router'}`;
  const example = ex?.set_size !== undefined
    ? `e.g. token ${ex.token}: the device chose ${ex.set_size} distinct ${kind === 'experts' ? 'experts' : 'blocks'} where the reference chose its top-k (a set of another size is no near-tie)`
    : ex
    ? `e.g. token ${ex.token}: the reference chose ${kind === 'experts' ? 'expert' : 'block'} ${ex.reference_choice} over ${ex.device_choice} by a margin of ${fmt(ex.margin)}, the device chose ${ex.device_choice} although its score error there is ${fmt(ex.score_error)}${ex.layer_score_error !== null ? ` (layer's isolated score error ${fmt(ex.layer_score_error)})` : ''}`
    : '';
  const noBias = bugs.length > 0 && bugs.every((x) => x.selected_without_bias === true);
  const head = `${f.scoring_bug} of ${f.count} top-k flip${f.count === 1 ? '' : 's'} (${f.mode} mode) have reference margins more than the policy's factor beyond the device's own score error: its scores are right, its choices are not`;
  if (noBias) {
    return {
      stage: s.name,
      cause: 'router-bias-dropped',
      source: 'activations',
      substage,
      evidence: `${head}; every such choice is exactly the top-k of the device's scores without the selection bias (gate.bias), and not with it; ${example}; with the reference's choices (isolated, accumulated-forced) the stage passes, as the bias enters selection only${weightsClean}`,
      hint: 'add gate.bias to the scores before the top-k (and only there: the routing weights use the unbiased scores)',
    };
  }
  return {
    stage: s.name,
    cause: 'scoring-bug',
    source: 'activations',
    substage,
    evidence: `${head}: a scoring bug in the ${kind === 'experts' ? 'router' : 'indexer'}'s selection at ${substage}; ${example}${weightsClean}`,
    hint: `compare the device's selection scores with the reference's at ${substage} (a rescaled score or bias, a wrong top-k)`,
  };
}

/** The first failing sub-stage is a score sub-stage (moe.scores): the router's scores themselves are wrong. */
function scoreSubstageDiagnosis(s: StageResult, policy: Policy, weightsClean: string): Diagnosis | null {
  const first = s.drill?.first_failing ?? null;
  if (first === null || !first.endsWith('.scores')) return null;
  // only the scores: a bug upstream of them (every matrix product, the attention input) moves them too
  if (s.drill!.substages.some((q) => q.status === 'fail' && !q.name.endsWith('.scores'))) return null;
  const x = s.drill!.substages.find((q) => q.name === first)!;
  const rm = policy.ratio_metric;
  const ratio = floorRatio(x.metrics[rm], x.floor?.[rm] ?? 0);
  return {
    stage: s.name,
    cause: 'scoring-bug',
    source: 'activations',
    substage: first,
    evidence: `on the reference's input the device's selection scores at ${first} are off by max_abs ${fmt(x.metrics.max_abs)} (${rm} ${fmt(ratio)}× their FP16 floor, rel_l2 ${fmt(x.metrics.rel_l2)}, cosine ${fmt(x.metrics.cosine)}) while the sub-stages before them pass: a scoring bug (a rescaled score, a wrong score function), which moves the top-k choice${policy.rule === 'floor' ? '' : ''} even where the normalised routing weights hide it${weightsClean}`,
    hint: 'compare the router kernel with the reference op by op: the gate GEMM, sqrt-softplus, any scale applied before the top-k',
  };
}

/**
 * Own-error failures judged against the FP16 floor, by how the error is spread over positions and sub-stages
 * (the drill's position profiles, error / floor per eighth of the tokens):
 *   - rope-angle-fp16: the attention sub-stage fails first, within the bound at the first positions and at
 *     least twice as far above its floor over the last half of the positions as over the first quarter (an
 *     angle t·θ off by FP16 spacing of t·θ, so by more the later the token);
 *   - fp16-accumulate: the attention and the FFN sub-stages (every matrix product) are far above their floors
 *     from the first positions on, with no trend, while the weights dequantize exactly: the products' sums
 *     lose bits, not the inputs.
 */
function floorSignature(s: StageResult, policy: Policy, weightsClean: string): Diagnosis | null {
  // the score sub-stages follow what feeds them; the signatures are read on the sublayer outputs
  const failing = s.drill?.substages.filter((x) => x.status === 'fail' && x.position_profile?.floor != null && !x.name.endsWith('.scores')) ?? [];
  if (failing.length === 0) return null;
  const ratios = (x: (typeof failing)[number]) => x.position_profile!.error.map((e, i) => floorRatio(e, x.position_profile!.floor![i]));
  const bound = policy.floor_ratio;
  const first = failing[0];
  const r = ratios(first);
  const half = r.slice(Math.floor(r.length / 2));
  const mean = (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length;
  // growth: error/floor over the last half of the positions against the first quarter (a RoPE angle error
  // grows with t·θ; a correct path's ratio is flat, so twice is far outside its scatter)
  const growth = r.length >= 4 ? mean(half) / Math.max(mean(r.slice(0, Math.max(1, Math.floor(r.length / 4)))), 1e-30) : 0;
  const rs = r.map((x) => fmt(x)).join(', ');
  const subOf = (name: string) => name.split('.').slice(2).join('.');
  const sub = { substage: first.name };
  if (subOf(first.name).startsWith('attn') && r.length >= 4 && r[0] <= bound && growth >= 2) {
    return {
      stage: s.name,
      cause: 'rope-angle-fp16',
      source: 'activations',
      ...sub,
      evidence: `isolated error / FP16 floor at ${first.name} grows with position (per eighth of the tokens: ${rs}): within the bound at the first positions, ${fmt(growth)}× as far above the floor over the last half as over the first quarter — the signature of RoPE angles t·θ rounded to FP16${weightsClean}`,
      hint: 'compute the RoPE angles (position × inverse frequency) in FP32 or wider; only cos/sin may be stored in FP16',
    };
  }
  const kinds = new Set(failing.map((x) => subOf(x.name).split('.')[0]));
  const flat = failing.every((x) => {
    const q = ratios(x);
    return q[0] > bound / 2 && Math.max(...q.slice(Math.floor(q.length / 2))) < 3 * q[0];
  });
  if (kinds.has('attn') && (kinds.has('mlp') || kinds.has('moe')) && flat && weightsClean !== '') {
    return {
      stage: s.name,
      cause: 'fp16-accumulate',
      source: 'activations',
      ...sub,
      evidence: `every matrix-product sub-stage of the layer is far above its FP16 floor from the first positions on, with no trend over positions (${failing.map((x) => `${x.name} ${policy.ratio_metric} ${fmt(x.metrics[policy.ratio_metric])} = ${fmt(floorRatio(x.metrics[policy.ratio_metric], x.floor?.[policy.ratio_metric] ?? 0))}× its floor`).join(', ')})${(s.isolated?.max_abs ?? Infinity) <= policy.fail_above ? `, although under max_abs ${policy.fail_above} (${fmt(s.isolated!.max_abs)}) a fixed rule would pass it` : ''}: sums that lose bits as they grow — matrix products accumulating in FP16${weightsClean}`,
      hint: 'set the GEMM compute type to FP32 (rocBLAS/hipBLASLt compute_type f32 with f16 inputs and outputs)',
    };
  }
  return null;
}

export function stageCounts(stages: StageResult[]): Record<'pass' | 'warn' | 'fail', number> {
  const c = { pass: 0, warn: 0, fail: 0 };
  for (const s of stages) c[s.status]++;
  return c;
}
