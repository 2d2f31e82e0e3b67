/**
 * The Llama FP32 reference (reference-cpu/llama.ts, bound by harness/models/llama.ts as the runner binds it,
 * harness/arch/llama.ts) on the FP4 producer fixtures fixtures/formats/llama-tiny-<fmt> against
 * scripts/golden/llama_numpy.py, a float64 numpy LlamaForCausalLM written independently from
 * spec/fp4-formats.md and transformers (its own safetensors parser, format detection and BF16/E4M3/E8M0/E2M1/
 * bitsandbytes decoders). Per format:
 *   - the golden was made from these very bytes: its sha256 of every shard and of config.json equal the
 *     fixture on disk (a regenerated fixture without a regenerated golden fails here);
 *   - every linear is recognised as the golden decoded it and dequantizes to the same float32 bits;
 *   - every stage and sub-stage (embed, layer.L, layer.L.attn, layer.L.mlp, final_norm, logits) within
 *     rel_l2 ‖ref − golden‖₂ / ‖golden‖₂ ≤ 1e-5.
 * A missing fixture or golden fails with how to regenerate it; nothing here skips.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { relL2 } from './rel_err.js';
import { decodeToF32 } from '../../harness/formats/dtypes.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { SafetensorsFile } from '../../harness/io/safetensors.js';
import { LLAMA_LINEARS, LlamaCheckpoint, llamaLinearStem } from '../../harness/models/llama.js';
import { dequantLinear } from '../dequant.js';
import { LlamaReference } from '../llama.js';

/** The fixtures checked: adding a format is one entry here (bnb-nf4 and bnb-fp4 once their fixtures exist). */
const FORMATS = ['quark-mxfp4', 'modelopt-nvfp4', 'ct-nvfp4', 'ct-mxfp4', 'bnb-nf4', 'bnb-fp4'] as const;

/**
 * One bound for every stage: the reference computes in FP32 (FP32 GEMM and accumulation, every weight exact),
 * the golden in float64 on the same weights, so the gap is FP32 rounding — about 1e-7 on this 4-layer
 * model, two orders below the bound. A wrong decoding rule moves the logits by ~1 (golden.json
 * `format.mistakes`), six orders above it.
 */
const REL_L2_BOUND = 1e-5;

const ROOT = path.join(import.meta.dirname, '..', '..');
const fixtureDir = (fmt: string) => path.join(ROOT, 'fixtures', 'formats', `llama-tiny-${fmt}`);
const goldenDir = (fmt: string) => `${fixtureDir(fmt)}-golden`;

function regenerate(fmt: string): string {
  return (
    `regenerate: \`node dist/harness/cli/main.js fixture llama-tiny fixtures/formats/llama-tiny-${fmt} --format ${fmt}\`, then ` +
    `\`python3 scripts/golden/llama_numpy.py --fixture fixtures/formats/llama-tiny-${fmt} --out fixtures/formats/llama-tiny-${fmt}-golden\``
  );
}

interface GoldenLinear {
  format: string;
  tensors: Record<string, string>;
  dequant_f32_sha256: string;
}

interface GoldenMeta {
  fixture_sha256: Record<string, string>;
  config_sha256: string;
  tokens: number[];
  stages: string[];
  format: { quant_method: string | null; modules_by_format: Record<string, string[]>; linears: Record<string, GoldenLinear> };
}

/** The fixture and its golden, both present, or an Error that says how to make them. */
function need(fmt: string): { meta: GoldenMeta; goldenFile: string } {
  const goldenFile = path.join(goldenDir(fmt), 'golden.safetensors');
  const metaFile = path.join(goldenDir(fmt), 'golden.json');
  for (const p of [path.join(fixtureDir(fmt), 'config.json'), metaFile, goldenFile]) {
    if (!fs.existsSync(p)) throw new Error(`missing ${path.relative(ROOT, p)}: ${regenerate(fmt)}`);
  }
  return { meta: JSON.parse(fs.readFileSync(metaFile, 'utf8')) as GoldenMeta, goldenFile };
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

function withCheckpoint<T>(fmt: string, fn: (m: LlamaCheckpoint) => T): T {
  const ck = Checkpoint.open(fixtureDir(fmt));
  try {
    return fn(new LlamaCheckpoint(ck));
  } finally {
    ck.close();
  }
}

/** Every stage the reference exposes, under the golden's names, for the given tokens (prefill, positions 0..S-1). */
function referenceStages(m: LlamaCheckpoint, tokens: number[]): Map<string, { shape: number[]; data: Float32Array }> {
  const ref = new LlamaReference(m);
  const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  let x = ref.embed(tokens);
  out.set('embed', x);
  for (let L = 0; L < m.cfg.layers; L++) {
    const r = ref.layer(L, x, m.loadLayer(L), ctx);
    out.set(`layer.${L}`, r.out);
    for (const [k, a] of Object.entries(r.substages ?? {})) out.set(`layer.${L}.${k}`, a);
    x = r.out;
  }
  const fn = ref.finalNorm(x);
  out.set('final_norm', fn);
  out.set('logits', ref.logits(fn));
  return out;
}

describe.each(FORMATS)('llama-tiny-%s: FP32 reference vs the float64 numpy golden', (fmt) => {
  it('the golden was made from the fixture on disk (sha256 of every shard and of config.json)', () => {
    const { meta } = need(fmt);
    const shards = fs.readdirSync(fixtureDir(fmt)).filter((f) => f.endsWith('.safetensors')).sort();
    expect(shards, `shards of ${fixtureDir(fmt)} vs golden.json; ${regenerate(fmt)}`).toEqual(Object.keys(meta.fixture_sha256).sort());
    for (const f of shards) {
      expect(sha256(fs.readFileSync(path.join(fixtureDir(fmt), f))), `${f} changed since its golden was made; ${regenerate(fmt)}`).toBe(meta.fixture_sha256[f]);
    }
    expect(sha256(fs.readFileSync(path.join(fixtureDir(fmt), 'config.json'))), `config.json changed since its golden was made; ${regenerate(fmt)}`).toBe(meta.config_sha256);
  });

  it('every linear recognised as the golden decoded it, dequantized to the same float32 bits', () => {
    const { meta } = need(fmt);
    // the fixture is what its name says: layer 0 plain, the rest in this producer's form
    expect(Object.keys(meta.format.modules_by_format).sort()).toEqual(['plain', fmt].sort());
    withCheckpoint(fmt, (m) => {
      let n = 0;
      for (let L = 0; L < m.cfg.layers; L++) {
        const w = m.loadLayer(L);
        for (const key of LLAMA_LINEARS) {
          const stem = llamaLinearStem(L, key);
          const g = meta.format.linears[stem];
          expect(g, `golden.json has no ${stem}`).toBeDefined();
          const lw = w[key];
          expect(lw.encoding ?? 'plain', stem).toBe(g.format);
          expect(lw.name, stem).toBe(g.tensors.weight);
          // −0 and +0 are one value; the golden hashes +0
          const bits = Float32Array.from(dequantLinear(lw), (v) => v + 0);
          expect(sha256(new Uint8Array(bits.buffer)), `${stem} (${g.format}) dequantizes to other float32 bits than the golden's`).toBe(g.dequant_f32_sha256);
          n++;
        }
      }
      expect(n).toBe(Object.keys(meta.format.linears).length);
    });
  });

  it(`every stage and sub-stage within rel_l2 ${REL_L2_BOUND}`, () => {
    const { meta, goldenFile } = need(fmt);
    const g = SafetensorsFile.open(goldenFile);
    try {
      const read = (name: string) => {
        const i = g.get(name);
        if (i === undefined) throw new Error(`${path.relative(ROOT, goldenFile)} has no ${name}; ${regenerate(fmt)}`);
        return { shape: i.shape, data: decodeToF32(i.dtype, g.read(i), i.shape.reduce((a, b) => a * b, 1)) };
      };
      const tokens = Array.from(read('tokens').data);
      expect(tokens).toEqual(meta.tokens);
      const ref = withCheckpoint(fmt, (m) => {
        expect(tokens[0]).toBe(m.cfg.bos);
        return referenceStages(m, tokens);
      });
      // the same stages on both sides: none left uncompared
      expect([...ref.keys()].sort()).toEqual([...meta.stages].sort());
      expect([...g.tensors.keys()].filter((n) => n !== 'tokens').sort()).toEqual([...meta.stages].sort());
      const errs: Record<string, number> = {};
      for (const name of meta.stages) {
        const gold = read(name);
        const r = ref.get(name)!;
        expect(r.shape, name).toEqual(gold.shape);
        errs[name] = relL2(r.data, gold.data);
      }
      const over = Object.entries(errs).filter(([, e]) => !(e <= REL_L2_BOUND));
      expect(over, `stages over rel_l2 ${REL_L2_BOUND}: ${JSON.stringify(errs)}`).toEqual([]);
      expect(errs.embed).toBe(0);
    } finally {
      g.close();
    }
  });
});
