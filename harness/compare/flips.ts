/**
 * Flips judged, not just counted (DESIGN §5). A token whose top-k set differs between the paths swapped at
 * least one candidate a the reference chose for one b it rejected. The reference ranks them by its selection
 * score v = s + bias (s the router's scores, bias DeepSeek-V4's gate.bias, for selection only), so
 * margin = v(a) − v(b) ≥ 0. The device ranks by its own s' + bias: it can prefer b only if
 * |s'(a) − s(a)| + |s'(b) − s(b)| ≥ margin. So a flip is benign — a near-tie that the device's score error
 * tipped — when the margin is within that error; when the margin is several times larger (policy
 * behaviour.flip_factor), the device's scores cannot explain its choice: the selection itself is wrong
 * (a dropped or rescaled bias, a wrong top-k), a scoring bug at that layer.
 * The score error used is the larger of the error at the two candidates on this token and the layer's
 * isolated score error (the device's own, on the reference's input): a near-tie is judged against the
 * error the device shows there, not against a lucky token.
 */
import type { LayerResult, SelectionScores } from '../models/path.js';

export interface Flip {
  token: number;
  layer: number;
  /** selection kind: experts, indexer */
  kind: string;
  /** the candidate the reference chose and the device did not (the reference's lowest-scored such) */
  reference_choice: number;
  /** the candidate the device chose instead (the reference's highest-scored such) */
  device_choice: number;
  /** reference selection score of reference_choice minus that of device_choice */
  margin: number;
  /** the reference's own decision margin at this token: its last chosen minus its first rejected score */
  decision_margin: number;
  /** |Δs| of the device's scores at the two candidates */
  score_error: number;
  /** the device's isolated score error at this layer (max |Δs| of the sub-stage), when it ran */
  layer_score_error: number | null;
  judgement: 'benign' | 'scoring-bug' | 'unjudged';
  /** the device's set is the top-k of its scores without the selection bias (the signature of router-bias-dropped) */
  selected_without_bias?: boolean;
  /** the size of the device's set (distinct candidates counted once) where it is not the reference's k */
  set_size?: number;
}

export interface FlipSummary {
  mode: 'accumulated' | 'isolated';
  count: number;
  benign: number;
  scoring_bug: number;
  unjudged: number;
  /** the flips, in token order (the first MAX_LISTED: count has them all) */
  list: Flip[];
  /** every token whose flip is benign, ascending (not capped) */
  benign_tokens: number[];
  /** every token with a flip, ascending (not capped): where the free run stops being the forced run (compare/forced_rows.ts) */
  tokens: number[];
}

const MAX_LISTED = 64;

/** Top-k indices by value, ties to the lowest index (both paths' rule), ascending. */
export function topkIds(v: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: v.length }, (_, i) => i);
  idx.sort((a, b) => v[b] - v[a] || a - b);
  return idx.slice(0, k).sort((a, b) => a - b);
}

/** The sub-stage whose error is a selection kind's score error. */
export const SCORE_SUBSTAGE: Record<string, string> = { experts: 'moe.scores', indexer: 'attn.indexer.scores' };

/**
 * Judge every flip of one layer. `layerScoreError`: per kind, the isolated max |Δs| (null when not measured).
 * Returns null when no selection differs.
 */
export function judgeFlips(L: number, ref: LayerResult, dev: LayerResult, mode: FlipSummary['mode'], flipFactor: number, layerScoreError: Record<string, number | null>): FlipSummary | null {
  if (ref.selections === null || dev.selections === null) return null;
  const list: Flip[] = [];
  let count = 0;
  const tally = { benign: 0, scoring_bug: 0, unjudged: 0 };
  const benignTokens: number[] = [];
  const tokens: number[] = [];
  const kinds = Object.keys(ref.selections);
  const S = ref.selections[kinds[0]]?.length ?? 0;
  for (let t = 0; t < S; t++) {
    let flipped: Flip | null = null;
    for (const kind of kinds) {
      const R = ref.selections[kind][t];
      const D = dev.selections[kind]?.[t] ?? [];
      if (R.length === D.length && R.every((v, i) => v === D[i])) continue;
      const f = judgeOne(L, t, kind, R, D, ref.scores?.[kind], dev.scores?.[kind], flipFactor, layerScoreError[kind] ?? null);
      // one record per token: the worst judgement over its kinds
      if (flipped === null || rank(f.judgement) > rank(flipped.judgement)) flipped = f;
    }
    if (flipped === null) continue;
    count++;
    tokens.push(t);
    tally[flipped.judgement === 'scoring-bug' ? 'scoring_bug' : flipped.judgement]++;
    if (flipped.judgement === 'benign') benignTokens.push(t);
    if (list.length < MAX_LISTED) list.push(flipped);
  }
  return count === 0 ? null : { mode, count, ...tally, list, benign_tokens: benignTokens, tokens };
}

const rank = (j: Flip['judgement']) => ({ benign: 0, unjudged: 1, 'scoring-bug': 2 })[j];

function judgeOne(L: number, t: number, kind: string, R: number[], D: number[], rs: SelectionScores | undefined, ds: SelectionScores | undefined, factor: number, layerErr: number | null): Flip {
  const onlyR = R.filter((e) => !D.includes(e));
  const onlyD = D.filter((e) => !R.includes(e));
  const base = { token: t, layer: L, kind, layer_score_error: layerErr };
  // a set of another size, or naming a candidate twice, is no near-tie: no score error explains choosing k−1 or k+1
  // (a misread num_experts_per_tok, a dropped or duplicated index), so it fails as a selection bug, never unjudged
  if (D.length !== R.length || new Set(D).size !== D.length) {
    return { ...base, reference_choice: onlyR[0] ?? -1, device_choice: onlyD[0] ?? -1, margin: NaN, decision_margin: NaN, score_error: NaN, judgement: 'scoring-bug', set_size: new Set(D).size };
  }
  if (rs === undefined || ds === undefined || onlyR.length === 0 || onlyD.length === 0) {
    return { ...base, reference_choice: onlyR[0] ?? -1, device_choice: onlyD[0] ?? -1, margin: NaN, decision_margin: NaN, score_error: NaN, judgement: 'unjudged' };
  }
  const n = rs.scores.shape[1];
  const s = rs.scores.data.subarray(t * n, (t + 1) * n);
  const sd = ds.scores.data.subarray(t * n, (t + 1) * n);
  const bias = rs.bias;
  const v = (e: number) => s[e] + (bias !== null ? bias[e] : 0);
  const a = onlyR.reduce((x, y) => (v(y) < v(x) ? y : x));
  const b = onlyD.reduce((x, y) => (v(y) > v(x) ? y : x));
  const margin = v(a) - v(b);
  const vs = Float64Array.from(s, (x, e) => x + (bias !== null ? bias[e] : 0));
  const order = topkIds(vs, R.length + 1);
  const lastChosen = Math.min(...R.map(v));
  const firstRejected = Math.max(...order.filter((e) => !R.includes(e)).map(v));
  const scoreError = Math.abs(sd[a] - s[a]) + Math.abs(sd[b] - s[b]);
  const scale = Math.max(scoreError, layerErr ?? 0);
  const judgement = margin <= factor * scale ? 'benign' : 'scoring-bug';
  const flip: Flip = { ...base, reference_choice: a, device_choice: b, margin, decision_margin: lastChosen - firstRejected, score_error: scoreError, judgement };
  if (bias !== null) {
    const plain = topkIds(sd, D.length);
    const biased = topkIds(Float64Array.from(sd, (x, e) => x + bias[e]), D.length);
    const same = (x: number[], y: number[]) => x.length === y.length && x.every((q, i) => q === y[i]);
    flip.selected_without_bias = same(plain, D) && !same(biased, D);
  }
  return flip;
}
