/**
 * Each DeepSeek-V4 mechanism changes the output: the sliding window, the compressed candidates (CSA and HCA),
 * the indexer's selection, the attention sink, hash routing and the SwiGLU clamp. For every ablation the
 * numpy golden stores (scripts/golden/deepseek_v4_numpy.py, `ablation.<name>.logits`) the TS reference with the
 * same mechanism removed must
 *   (a) match the numpy ablation's logits to the golden test's tolerance (2e-6 of max |value|: FP32 vs float64),
 *   (b) differ from the golden's base logits by far more than that (≥ 5% of max |value|, 25 000× the tolerance;
 *       on the committed fixture the smallest is no_clamp's ≈ 30%), so a reference missing the mechanism fails
 *       the golden check by a wide margin;
 *   (c) change exactly the rows the numpy run changed (golden.json `rows_changed`; unchanged rows are bit-equal
 *       to the TS base run because every per-row computation is the same).
 * `noHca` (drop only the non-overlap compressed entries) has no golden; it must differ from the base and from
 * no_compression, and change exactly the rows from the first HCA entry on.
 *
 * The fixture and golden are committed (fixtures/deepseek-v4-tiny, fixtures/deepseek-v4-tiny-golden): missing
 * files fail the suite rather than skip it.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeToF32 } from '../../harness/formats/dtypes.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { SafetensorsFile } from '../../harness/io/safetensors.js';
import { DeepseekV4Checkpoint, type DeepseekV4LayerWeights } from '../../harness/models/deepseek_v4.js';
import { type DeepseekV4Ablations, DeepseekV4Reference, deepseekV4Reference } from '../deepseek_v4.js';
import { relErr } from './rel_err.js';

const ROOT = path.join(import.meta.dirname, '..', '..');
const FIXTURE = path.join(ROOT, 'fixtures', 'deepseek-v4-tiny');
const GOLDEN_DIR = path.join(ROOT, 'fixtures', 'deepseek-v4-tiny-golden');
const GOLDEN = path.join(GOLDEN_DIR, 'golden.safetensors');
const GOLDEN_JSON = path.join(GOLDEN_DIR, 'golden.json');

/** the golden test's tolerance: FP32 reference vs float64 numpy, relative to the max |value| */
const TOL = 2e-6;
/** an ablation must move the logits by at least this (relative to max |golden base|) */
const FAR = 0.05;

/** rows (positions) of [S, V] logits where a and b differ at all */
function rowsChanged(a: Float32Array, b: Float32Array, V: number): number {
  let n = 0;
  for (let r = 0; r < a.length / V; r++) {
    for (let i = r * V; i < (r + 1) * V; i++) {
      if (a[i] !== b[i]) {
        n++;
        break;
      }
    }
  }
  return n;
}

/** the golden's ablations, by numpy name, with the reference flag that mirrors each */
const GOLDEN_ABLATIONS: Array<[string, keyof DeepseekV4Ablations]> = [
  ['window_inf', 'windowInf'],
  ['no_compression', 'noCompression'],
  ['indexer_all', 'indexerAll'],
  ['no_sink', 'noSink'],
  ['score_routing', 'scoreRouting'],
  ['no_clamp', 'noClamp'],
];

interface GoldenDoc {
  ablations: Record<string, { rel_l2: number; rows_changed: number }>;
  config: { ratios: number[]; n_layers: number };
}

describe('deepseek_v4 ablations: every mechanism changes the output (fixture vs numpy golden)', () => {
  let m: DeepseekV4Checkpoint;
  let layers: DeepseekV4LayerWeights[];
  let tokens: number[];
  let V: number;
  const golden = new Map<string, Float32Array>();
  let doc: GoldenDoc;
  let tsBase: Float32Array;
  const measured: string[] = [];

  /** TS reference logits [S, vocab] with `ablations` */
  function forward(ablations: DeepseekV4Ablations): Float32Array {
    const ref = new DeepseekV4Reference(m, { ablations });
    const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
    let x = ref.embed(tokens);
    layers.forEach((w, L) => (x = ref.layer(L, x, w, ctx).out));
    return ref.logits(ref.finalNorm(x)).data;
  }

  beforeAll(() => {
    const missing = [FIXTURE, GOLDEN, GOLDEN_JSON].filter((p) => !fs.existsSync(p));
    if (missing.length > 0) {
      throw new Error(
        `missing committed fixture files: ${missing.map((p) => path.relative(ROOT, p)).join(', ')}. ` +
          'fixtures/deepseek-v4-tiny is written by fixtures/generate.ts, its golden by scripts/golden/deepseek_v4_numpy.py.',
      );
    }
    const g = SafetensorsFile.open(GOLDEN);
    try {
      const read = (name: string) => {
        const i = g.get(name);
        if (i === undefined) throw new Error(`${path.relative(ROOT, GOLDEN)} has no tensor ${name}`);
        return decodeToF32(i.dtype, g.read(i), i.shape.reduce((a, b) => a * b, 1));
      };
      tokens = Array.from(read('tokens'));
      golden.set('logits', read('logits'));
      for (const [name] of GOLDEN_ABLATIONS) golden.set(name, read(`ablation.${name}.logits`));
    } finally {
      g.close();
    }
    doc = JSON.parse(fs.readFileSync(GOLDEN_JSON, 'utf8')) as GoldenDoc;
    m = new DeepseekV4Checkpoint(Checkpoint.open(FIXTURE));
    m.conformance();
    V = m.cfg.vocab;
    layers = Array.from({ length: m.cfg.layers }, (_, L) => m.loadLayer(L));
    tsBase = forward({});
  });

  afterAll(() => {
    if (measured.length > 0) console.info(`deepseek_v4 ablations (each relative to the max |value| of the golden it is compared with):\n  ${measured.join('\n  ')}`);
  });

  it('with every ablation off (explicitly false, through deepseekV4Reference) the reference is the golden base', () => {
    const off: DeepseekV4Ablations = { windowInf: false, noCompression: false, noHca: false, indexerAll: false, noSink: false, scoreRouting: false, noClamp: false };
    const ref = deepseekV4Reference(m, { ablations: off }).reference;
    const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
    let x = ref.embed(tokens);
    layers.forEach((w, L) => (x = ref.layer(L, x, w, ctx).out));
    const logits = ref.logits(ref.finalNorm(x)).data;
    expect(rowsChanged(logits, tsBase, V)).toBe(0);
    expect(relErr(tsBase, golden.get('logits')!)).toBeLessThan(TOL);
  });

  for (const [name, flag] of GOLDEN_ABLATIONS) {
    it(`${name} (${flag}) matches the numpy ablation and fails the base golden check`, () => {
      const logits = forward({ [flag]: true });
      const base = golden.get('logits')!;
      const want = golden.get(name)!;
      const vsAblation = relErr(logits, want);
      const vsBase = relErr(logits, base);
      measured.push(`${name}: vs numpy ablation ${vsAblation.toExponential(2)}, vs golden base ${vsBase.toExponential(2)}, rows changed ${rowsChanged(logits, tsBase, V)}/${tokens.length}`);
      expect(vsAblation, `${name} vs ablation.${name}.logits`).toBeLessThan(TOL);
      expect(relErr(want, base), `golden ablation.${name} vs golden base`).toBeGreaterThan(FAR);
      expect(vsBase, `${name} vs golden base`).toBeGreaterThan(FAR);
      expect(rowsChanged(logits, tsBase, V), `${name}: rows changed`).toBe(doc.ablations[name].rows_changed);
    });
  }

  it('noHca (no golden) changes the output, differently from no_compression, from the first HCA entry on', () => {
    const logits = forward({ noHca: true });
    const vsBase = relErr(logits, golden.get('logits')!);
    const vsNoComp = relErr(logits, golden.get('no_compression')!);
    // first HCA entry (ratio r ≠ 4, no indexer) is visible from t = r − 1
    const hcaRatios = doc.config.ratios.slice(0, doc.config.n_layers).filter((r) => r > 0 && r !== 4);
    expect(hcaRatios.length, 'the fixture has an HCA layer').toBeGreaterThan(0);
    const rows = tokens.length - (Math.min(...hcaRatios) - 1);
    measured.push(`noHca: vs golden base ${vsBase.toExponential(2)}, vs numpy no_compression ${vsNoComp.toExponential(2)}, rows changed ${rowsChanged(logits, tsBase, V)}/${tokens.length}`);
    expect(vsBase).toBeGreaterThan(FAR);
    expect(vsNoComp).toBeGreaterThan(FAR);
    expect(rowsChanged(logits, tsBase, V)).toBe(rows);
  });
});
