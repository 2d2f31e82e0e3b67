/**
 * Coverage-guided fuzzing of the checkpoint parsers (issue 11 point 6): config.json, the shard index and
 * the safetensors header, through Checkpoint.open, the architecture registry, the weight binding and the
 * conformance check — what every command runs before it reads a weight. The fuzzer (fuzz/coverage.ts) keeps
 * an input when it reaches a new block of harness/io, harness/formats, harness/models or harness/arch.
 *
 * One input is the three files joined by SPLIT. The committed corpus (fuzz-corpus/, the seeds and what
 * earlier runs found) is replayed first, then new inputs are tried for LAYERDIFF_FUZZ_SECONDS (default 45):
 * every input must end as bad input (InputError, exit 2) or open cleanly. LAYERDIFF_FUZZ_SAVE=1 writes the
 * grown corpus back.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Coverage, fuzz } from './fuzz/coverage.js';

// coverage on before the parsers are imported (below, dynamically): V8 reports blocks only for code compiled after
const cov = new Coverage(['/harness/io/', '/harness/formats/', '/harness/models/', '/harness/arch/']);
const { architectureFor } = await import('../arch/registry.js');
const { InputError } = await import('../errors.js');
const { Checkpoint } = await import('../io/checkpoint.js');
const { encodeSafetensors } = await import('../io/safetensors.js');
const { selectBackend } = await import('../runner/backend.js');
const { openModel } = await import('../runner/model.js');
type TensorToWrite = import('../io/safetensors.js').TensorToWrite;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CORPUS = path.join(HERE, 'fuzz-corpus');
const SECONDS = Number(process.env.LAYERDIFF_FUZZ_SECONDS ?? 45);
const SPLIT = Buffer.from('\n--8<--\n');
const FILES = ['config.json', 'model.safetensors.index.json', 'model-00001-of-00001.safetensors'] as const;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fuzzcov-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function split(input: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  let rest = input;
  for (let i = 0; i < FILES.length - 1; i++) {
    const at = rest.indexOf(SPLIT);
    if (at < 0) break;
    parts.push(rest.subarray(0, at));
    rest = rest.subarray(at + SPLIT.length);
  }
  parts.push(rest);
  return parts;
}

const join = (parts: readonly Buffer[]) => Buffer.concat(parts.flatMap((p, i) => (i === 0 ? [p] : [SPLIT, p])));

/** A one-layer Llama of hidden 8 in the real layout: BF16 tensors and one FP8-block linear with its E8M0 scale. */
function seedLlama(fp8: boolean): Buffer {
  const D = 8;
  const I = 16;
  const V = 16;
  const t: TensorToWrite[] = [];
  const bf16 = (name: string, shape: number[]) => t.push({ name, dtype: 'BF16', shape, data: new Uint8Array(shape.reduce((a, b) => a * b, 1) * 2).fill(0x3c) });
  bf16('model.embed_tokens.weight', [V, D]);
  bf16('lm_head.weight', [V, D]);
  bf16('model.norm.weight', [D]);
  for (const n of ['input_layernorm', 'post_attention_layernorm']) bf16(`model.layers.0.${n}.weight`, [D]);
  const lin: Array<[string, number, number]> = [['self_attn.q_proj', D, D], ['self_attn.k_proj', D / 2, D], ['self_attn.v_proj', D / 2, D], ['self_attn.o_proj', D, D], ['mlp.gate_proj', I, D], ['mlp.up_proj', I, D], ['mlp.down_proj', D, I]];
  for (const [n, o, i] of lin) {
    if (fp8 && n === 'mlp.down_proj') {
      t.push({ name: `model.layers.0.${n}.weight`, dtype: 'F8_E4M3', shape: [o, i], data: new Uint8Array(o * i).fill(0x30) });
      t.push({ name: `model.layers.0.${n}.weight_scale_inv`, dtype: 'F32', shape: [1, 1], data: new Uint8Array(new Float32Array([0.5]).buffer) });
    } else bf16(`model.layers.0.${n}.weight`, [o, i]);
  }
  const shard = encodeSafetensors(t, { format: 'pt' });
  const config = {
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: D, intermediate_size: I, num_hidden_layers: 1, num_attention_heads: 2,
    num_key_value_heads: 1, head_dim: 4, vocab_size: V, rms_norm_eps: 1e-5, rope_theta: 10000, max_position_embeddings: 64, hidden_act: 'silu',
    tie_word_embeddings: false, ...(fp8 ? { quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] } } : {}),
  };
  const index = { metadata: { total_size: shard.length }, weight_map: Object.fromEntries(t.map((x) => [x.name, FILES[2]])) };
  return join([Buffer.from(JSON.stringify(config)), Buffer.from(JSON.stringify(index)), shard]);
}

const backend = selectBackend('emulated');
const dir = path.join(tmp, 'ck');
fs.mkdirSync(dir);

/** The target: the three files written, then everything a command does before reading weights. */
function run(input: Buffer): void {
  const parts = split(input);
  FILES.forEach((f, i) => {
    const p = path.join(dir, f);
    if (parts[i] !== undefined) fs.writeFileSync(p, parts[i]);
    else fs.rmSync(p, { force: true });
  });
  const ck = Checkpoint.open(dir);
  try {
    architectureFor(ck);
    const model = openModel(ck, backend, null);
    model.conformance();
    for (let L = 0; L < Math.min(model.numLayers, 2); L++) model.loadLayer(L);
  } finally {
    ck.close();
  }
}

describe('coverage-guided fuzzing of config, index and safetensors header', () => {
  it(`finds no input that ends other than as bad input or a clean open (${SECONDS} s)`, () => {
    const seeds = [seedLlama(false), seedLlama(true)];
    // the seeds are real checkpoints: they open cleanly
    for (const s of seeds) expect(() => run(s)).not.toThrow();
    const committed = fs.existsSync(CORPUS) ? fs.readdirSync(CORPUS).sort().map((f) => fs.readFileSync(path.join(CORPUS, f))) : [];
    const r = fuzz(cov, { run }, [...seeds, ...committed], {
      seconds: SECONDS, seed: Number(process.env.LAYERDIFF_FUZZ_SEED ?? 20261201), isBadInput: (e) => e instanceof InputError,
    });
    if (process.env.LAYERDIFF_FUZZ_SAVE === '1') {
      fs.mkdirSync(CORPUS, { recursive: true });
      r.corpus.slice(seeds.length).forEach((c, i) => fs.writeFileSync(path.join(CORPUS, `input-${String(i).padStart(4, '0')}.bin`), c));
    }
    const crashes = r.crashes.slice(0, 3).map((c) => `${c.error} on ${JSON.stringify(c.input.subarray(0, 200).toString('latin1'))}`);
    expect(crashes, `${r.crashes.length} crashing inputs in ${r.execs} runs`).toEqual([]);
    // the fuzzer works: it runs and it reaches code the seeds do not (every rejection path is such code)
    expect(r.execs).toBeGreaterThan(committed.length + seeds.length);
    expect(r.blocks).toBeGreaterThan(r.seedBlocks);
    console.log(`fuzz: ${r.execs} inputs in ${SECONDS} s, ${r.blocks} blocks covered (seeds ${r.seedBlocks}), corpus ${r.corpus.length}`);
  }, (SECONDS + 120) * 1000);
});
