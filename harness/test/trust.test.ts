/**
 * The trust chain and the data-loss paths (issue #11), each finding reproduced through the built CLI on a
 * copy of llama-tiny: writers that never replace links, devices or folders and never write inside the model
 * (also through a symlinked alias); outputs checked before the run; Ctrl-C/kill leave no partials (exit
 * 130/143); convert never deletes a good cache or a foreign folder; input faults are exit 2 with one line
 * (repeated options, EISDIR shards, FIFOs, `weight_map: ""`, 1e9 layers or new tokens); forward-pass
 * fields that are not implemented are refused by name; the record is internally consistent and a forged
 * digest-cache entry does not unlock the optimized path.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyCheckpoint, nanEmbedding, nanWeight } from '../../fixtures/inject.js';
import { shardName } from '../../fixtures/llama-tiny.js';
import { checkpointFingerprint, openCheckpointFingerprint } from '../gate/fingerprint.js';
import { Checkpoint } from '../io/checkpoint.js';
import { SafetensorsFile } from '../io/safetensors.js';
import { packageRoot } from '../version.js';
import { cliAsync, limit } from './async-cli.js';
import { rejectEmptyValues } from '../cli/argv.js';
import { cli, type CliResult, hashTree, LLAMA_TINY } from './cli.js';
import { Blake3 } from '../io/blake3.js';

process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-trust-'));
const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'cache'), OMP_NUM_THREADS: '1', LAYERDIFF_SIGNING_KEY: '', LAYERDIFF_REQUIRE_SIGNATURE: '' };
const model = path.join(tmp, 'llama-tiny');
/** gate and generate under one fixed rule (max_abs 0.1 / 0.01, not the FP16 floor rule): these tests are about the record, not the verdict */
const FIXED = ['--metric', 'max_abs', '--fail-above', '0.1', '--warn-above', '0.01'];
const run = (args: string[], extra: Record<string, string> = {}) => cliAsync(args[0] === 'gate' || args[0] === 'generate' ? [...args, ...FIXED] : args, { ...env, ...extra });
const oneLine = (r: CliResult) => r.stderr.trim().split('\n').filter((l) => l.startsWith('layerdiff: error:'));
/** exit 2 with exactly one error line matching `re` */
function badInput(r: CliResult, re: RegExp): void {
  expect(r.code, r.stderr).toBe(2);
  expect(oneLine(r)).toHaveLength(1);
  expect(r.stderr).toMatch(re);
  expect(r.stderr).not.toMatch(/internal error|at .*\.js:\d+/);
}
const editConfig = (dir: string, edit: (c: Record<string, unknown>) => void) => {
  const f = path.join(dir, 'config.json');
  const c = JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, unknown>;
  edit(c);
  fs.writeFileSync(f, JSON.stringify(c, null, 2));
};
const variant = (name: string, edit: (dir: string) => void) => {
  const d = path.join(tmp, name);
  copyCheckpoint(LLAMA_TINY(), d);
  edit(d);
  return d;
};
const partials = (dir: string) => (fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.includes('layerdiff-partial')) : []);

let modelHash: string;
beforeAll(() => {
  copyCheckpoint(LLAMA_TINY(), model);
  modelHash = hashTree(model);
});
afterAll(() => {
  expect(hashTree(model)).toBe(modelHash); // nothing below ever changed the checkpoint
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('writers never destroy', () => {
  it('refuse a symlink or a device as a report target, write - to stdout, and check every target before the run', async () => {
    const out = path.join(tmp, 'w1');
    fs.mkdirSync(out);
    const victim = path.join(out, 'victim.txt');
    fs.writeFileSync(victim, 'keep me');
    const link = path.join(out, 'link.json');
    fs.symlinkSync(victim, link);
    const fast = ['--layers', '0', '--no-drill'];
    const [viaLink, dev, sys, dash] = await limit(2, [
      () => run(['diff', model, '--json', link, ...fast]),
      () => run(['diff', model, '--html', '/dev/null', ...fast]),
      () => run(['diff', model, '--junit', '/sys/layerdiff-report.xml', ...fast]),
      () => run(['diff', model, '--json', '-', ...fast]),
    ]);
    badInput(viaLink, /--json: refusing to replace a symbolic link/);
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me');
    badInput(dev, /\/dev\/null: --html: refusing to replace a device/);
    expect(fs.statSync('/dev/null').isCharacterDevice()).toBe(true);
    badInput(sys, /--junit: cannot write here/); // found before the run: no stage line was printed
    expect(sys.stdout).toBe('');
    expect(dash.code).toBe(0);
    expect(JSON.parse(dash.stdout).schema).toBe('layerdiff.report/1');
  });

  it('never write inside the model directory through a symlinked alias, for diff, inspect --check, replay --json', async () => {
    const alias = path.join(tmp, 'Malias');
    fs.symlinkSync(model, alias);
    const bundle = path.join(tmp, 'bundle');
    fs.mkdirSync(path.join(bundle, 'model'), { recursive: true });
    const rs = await limit(2, [
      () => run(['diff', alias, '--json', path.join(alias, 'r.json'), '--layers', '0']),
      () => run(['diff', model, '--dump', path.join(alias, 'dump'), '--layers', '0']),
      () => run(['inspect', alias, '--check', '--json', path.join(alias, 'w.json')]),
      () => run(['replay', bundle, '--json', path.join(bundle, 'model', 'r.json')]),
    ]);
    for (const r of rs) badInput(r, /inside the model directory/);
    expect(hashTree(model)).toBe(modelHash);
    expect(fs.readdirSync(path.join(bundle, 'model'))).toEqual([]);
  });

  for (const [sig, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    it(`${sig} during diff --dump --save-golden removes every partial and exits ${code}`, async () => {
      const out = path.join(tmp, `sig-${code}`);
      const dump = path.join(out, 'dump');
      fs.mkdirSync(dump, { recursive: true });
      const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
      const p = spawn(process.execPath, [main, 'diff', model, '--dump', dump, '--save-golden', path.join(out, 'golden'), '--repeat', '20'], { env: { ...process.env, ...env }, stdio: 'ignore' });
      const exited = new Promise<number | null>((resolve) => p.on('exit', (c) => resolve(c)));
      // wait until the run is writing its partial dump, then interrupt it
      for (let i = 0; i < 600 && partials(dump).length === 0 && p.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
      expect(partials(dump).length).toBeGreaterThan(0);
      p.kill(sig);
      expect(await exited).toBe(code);
      expect(partials(dump)).toEqual([]);
      expect(partials(out)).toEqual([]);
      expect(fs.readdirSync(dump)).toEqual([]);
      expect(fs.existsSync(path.join(out, 'golden'))).toBe(false);
    }, 120_000);
  }

  // Linux: the fault on a truncated mapping as Linux delivers it, and /proc's list of the supervisor's children
  it.runIf(process.platform === 'linux')('a mapped file truncated under a run faults (SIGBUS), and the supervisor ends such a run as bad input: one line, exit 2, no partials', async () => {
    // the fault itself: a read pool's mapping (harness/io/map.ts) of a file that another process then truncates
    const f = path.join(tmp, 'truncated.bin');
    fs.writeFileSync(f, Buffer.alloc(2 << 20, 7));
    const map = path.join(packageRoot(), 'dist', 'harness', 'io', 'map.js');
    const script = `import * as fs from 'node:fs'; import { mapPopulated } from ${JSON.stringify(map)};
      const fd = fs.openSync(${JSON.stringify(f)}, 'r'); const m = new Uint8Array(mapPopulated(fd, 0, 2 << 20));
      if (m[(1 << 20) + 5] !== 7) process.exit(3); fs.truncateSync(${JSON.stringify(f)}, 4096); console.log(m[(1 << 20) + 5]);`;
    const faulted = await new Promise<NodeJS.Signals | null>((resolve) => spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' }).on('exit', (_c, sig) => resolve(sig)));
    expect(faulted).toBe('SIGBUS');
    // the supervisor's side: the run's child ends by SIGBUS while writing its dump
    const out = path.join(tmp, 'sig-bus');
    const dump = path.join(out, 'dump');
    fs.mkdirSync(dump, { recursive: true });
    const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
    const p = spawn(process.execPath, [main, 'diff', model, '--dump', dump, '--repeat', '20'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => p.on('close', (c) => resolve(c)));
    for (let i = 0; i < 600 && partials(dump).length === 0 && p.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
    expect(partials(dump).length).toBeGreaterThan(0);
    const children = fs.readFileSync(`/proc/${p.pid}/task/${p.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
    expect(children).toHaveLength(1);
    process.kill(children[0], 'SIGBUS');
    expect(await exited).toBe(2);
    expect(stderr.trim().split('\n').filter((l) => l.startsWith('layerdiff: error:'))).toEqual([expect.stringMatching(/mapped input became unreadable \(SIGBUS\)/)]);
    expect(partials(dump)).toEqual([]);
    expect(partials(out)).toEqual([]);
  }, 120_000);

  it('convert refuses a non-empty foreign folder, and a killed convert leaves the previous cache intact', async () => {
    const foreign = path.join(tmp, 'photos');
    fs.mkdirSync(foreign);
    fs.writeFileSync(path.join(foreign, 'manifest.json'), '{"mine": true}');
    fs.writeFileSync(path.join(foreign, 'cat.jpg'), 'meow');
    const before = hashTree(foreign);
    badInput(await run(['convert', model, '--fp16-cache', foreign]), /not empty and .*no readable manifest|is not an FP16 cache/);
    expect(hashTree(foreign)).toBe(before);

    const cache = path.join(tmp, 'fp16');
    expect((await run(['convert', model, '--fp16-cache', cache])).code).toBe(0);
    const good = hashTree(cache);
    expect((await run(['convert', model, '--fp16-cache', cache])).code).toBe(0); // a cache of this checkpoint may be refreshed
    fs.writeFileSync(path.join(cache, 'notes.txt'), 'mine');
    badInput(await run(['convert', model, '--fp16-cache', cache]), /files the cache's manifest does not list \(notes\.txt\)/);
    fs.rmSync(path.join(cache, 'notes.txt'));
    // a cache's contents apart from when it was written (the manifest's `created`): what a complete convert gives
    const contents = (dir: string) => {
      const mf = path.join(dir, 'manifest.json');
      const saved = fs.readFileSync(mf);
      try {
        const { created: _, ...man } = JSON.parse(saved.toString('utf8')) as Record<string, unknown>;
        fs.writeFileSync(mf, JSON.stringify(man));
        return hashTree(dir);
      } finally {
        fs.writeFileSync(mf, saved);
      }
    };
    const again = hashTree(cache);
    const whole = contents(cache);
    const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
    const p = spawn(process.execPath, [main, 'convert', model, '--fp16-cache', cache], { env: { ...process.env, ...env }, stdio: 'ignore' });
    const exited = new Promise<number | null>((resolve) => p.on('exit', (c) => resolve(c)));
    for (let i = 0; i < 600 && partials(tmp).length === 0 && p.exitCode === null; i++) await new Promise((r) => setTimeout(r, 20));
    p.kill('SIGTERM');
    const code = await exited;
    expect([0, 143]).toContain(code); // a tiny convert may finish first; either way the cache is whole
    expect(partials(tmp)).toEqual([]);
    // killed before its swap: the previous cache, byte for byte; killed after it (the signal can land between the
    // swap and the exit): the complete new cache, which differs only in when it was written
    if (code === 143 && hashTree(cache) !== again) expect(contents(cache)).toBe(whole);
    expect(good).toHaveLength(64);
  }, 120_000);
});

describe('input faults are exit 2, one line', () => {
  it('a repeated option, --max-new-tokens 1e9, an empty, directory, missing or looping shard, a FIFO config or shard', async () => {
    const emptyEntry = variant('empty-entry', (d) => {
      const f = path.join(d, 'model.safetensors.index.json');
      const ix = JSON.parse(fs.readFileSync(f, 'utf8')) as { weight_map: Record<string, string> };
      ix.weight_map['model.norm.weight'] = '';
      fs.writeFileSync(f, JSON.stringify(ix));
    });
    const dirShard = variant('dir-shard', (d) => {
      fs.rmSync(path.join(d, shardName(2)));
      fs.mkdirSync(path.join(d, shardName(2)));
    });
    const fifoConfig = variant('fifo-config', (d) => {
      fs.rmSync(path.join(d, 'config.json'));
      execFileSync('mkfifo', [path.join(d, 'config.json')]);
    });
    const fifoShard = variant('fifo-shard', (d) => {
      fs.rmSync(path.join(d, shardName(1)));
      execFileSync('mkfifo', [path.join(d, shardName(1))]);
    });
    const missingShard = variant('missing-shard', (d) => fs.rmSync(path.join(d, shardName(2))));
    const loopShard = variant('loop-shard', (d) => {
      fs.rmSync(path.join(d, shardName(2)));
      fs.symlinkSync(shardName(2), path.join(d, shardName(2)));  // itself: ELOOP on every lookup
    });
    const t0 = Date.now();
    const [twice, many, empty, dir, fc, fs1, missing, loop] = await limit(2, [
      () => run(['diff', model, '--layers', '0', '--layers', '1']),
      () => run(['generate', model, '--path', 'reference', '--tokens', '1,2', '--max-new-tokens', '1e9']),
      () => run(['inspect', emptyEntry]),
      () => run(['diff', dirShard]),
      () => run(['diff', fifoConfig]),
      () => run(['inspect', fifoShard]),
      () => run(['inspect', missingShard]),
      () => run(['inspect', loopShard]),
    ]);
    badInput(twice, /--layers is given more than once/);
    badInput(many, /--max-new-tokens 1000000000/);
    badInput(empty, /weight_map entry "" is not a shard file name/);
    badInput(dir, /is not a regular file/);
    badInput(fc, /config\.json: is a FIFO, not a regular file/);
    badInput(fs1, /is not a regular file|is a FIFO/);
    badInput(missing, new RegExp(`shard ${shardName(2)} named by the index does not exist`));
    badInput(loop, new RegExp(`shard ${shardName(2)} named by the index cannot be looked up \\(ELOOP\\)`));
    expect(Date.now() - t0).toBeLessThan(60_000); // nothing blocked on a FIFO
  }, 90_000);

  it('an option given an empty value, and -q with -v, are usage errors (yargs read an empty number as 0, an empty path as none)', () => {
    // the flags come from the parser of the command run (main.ts); these are diff's and generate's
    const flags = new Set(['help', 'version', 'quiet', 'verbose', 'fail-fast', 'drill', 'weights']);
    const rejectEmpty = (argv: readonly string[]) => rejectEmptyValues(argv, flags);
    for (const [argv, says] of [
      [['diff', '--warn-above='], /--warn-above is given an empty value/],
      [['generate', model, '--path', 'reference', '--tokens', '1,2', '--temperature='], /--temperature is given an empty value/],
      [['generate', model, '--tokens', '1,2', '--fp16-cache', ''], /--fp16-cache is given an empty value/],
      [['diff', '-q', '-v'], /--quiet and --verbose ask for opposite outputs/],
      [['diff', '-qv'], /--quiet and --verbose ask for opposite outputs/],
    ] as const) {
      expect(() => rejectEmpty(argv), argv.join(' ')).toThrow(says);
    }
    // an empty prompt is a prompt; flags take no value; values that merely look like flags are values
    expect(() => rejectEmpty(['generate', model, '--prompt', '', '--quiet'])).not.toThrow();
    expect(() => rejectEmpty(['diff', '--fail-above', '-1', '--no-drill', '-q'])).not.toThrow();
    expect(() => rejectEmpty(['generate', model, '--prompt', '-q', '--verbose'])).not.toThrow();
    // a flag's next token is not its value: here it is an empty positional (the model folder), also refused
    expect(() => rejectEmpty(['diff', '--fail-fast', '', '-q'])).toThrow(/an empty argument \(''\) is given; give what it stands for \(a path, a name\) or leave it out \(see layerdiff diff --help\)/);
    expect(() => rejectEmpty(['', 'diff'])).toThrow(/an empty command \(''\) is given/);
    expect(() => rejectEmpty(['--color', 'never', 'faults', ''])).toThrow(/\(see layerdiff faults --help\)$/); // an option's value is not the command
    // an option the command lacks is left to the parser's "unknown option", not called empty
    expect(() => rejectEmptyValues(['gate', '--fail-fast', ''], flags, new Set(['json']))).toThrow(/an empty argument/);
    expect(() => rejectEmptyValues(['gate', '--nonesuch='], flags, new Set(['json']))).not.toThrow();
    badInput(cli(['gate', LLAMA_TINY(), '--fail-fast=']), /unknown option --fail-fast/);
    badInput(cli(['diff', '--warn-above=']), /^layerdiff: error: --warn-above is given an empty value/);
    // named before yargs' own validation (an empty choice), with every flag of the command known to the parser
    badInput(cli(['diff', '--mode=']), /^layerdiff: error: --mode is given an empty value/);
    badInput(cli(['inspect', model, '--check', '--json', '']), /^layerdiff: error: --json is given an empty value/);
    badInput(cli(['diff', '-q', '--verbose']), /--quiet and --verbose ask for opposite outputs/);
  });

  it('num_hidden_layers 1e9 is refused at once, and tokens past max_position_embeddings are refused', async () => {
    const huge = variant('huge-layers', (d) => editConfig(d, (c) => (c.num_hidden_layers = 1e9)));
    const tokens = Array.from({ length: 300 }, (_, i) => String(i % 300)).join(',');
    const t0 = Date.now();
    const [h, long, gen] = await limit(2, [
      () => run(['diff', huge]),
      () => run(['diff', model, '--tokens', tokens]),
      // the last new token is never fed back: 3 + 254 new tokens use positions 0–255 and fit; 255 would not
      () => run(['generate', model, '--path', 'reference', '--tokens', '1,2,3', '--max-new-tokens', '255']),
    ]);
    badInput(h, /num_hidden_layers 1000000000 disagrees with the checkpoint, which stores layers 0-3/);
    expect(Date.now() - t0).toBeLessThan(60_000);
    badInput(long, /300 tokens, more than max_position_embeddings 256/);
    badInput(gen, /exceeds max_position_embeddings 256; give at most 254/);
  }, 90_000);
});

describe('every forward-pass field implemented or refused', () => {
  it('refuses hidden_act gelu, a bias the checkpoint lacks, a non-boolean bias flag, rms_norm_eps ≤ 0, naming field and value; and an empty tokenizer', async () => {
    // attention_bias / mlp_bias are implemented (harness/test/llama-bias.test.ts): true needs the .bias tensors
    const cases: Array<[string, (c: Record<string, unknown>) => void, RegExp]> = [
      ['gelu', (c) => (c.hidden_act = 'gelu'), /hidden_act "gelu" is not supported for llama/],
      ['attn-bias', (c) => (c.attention_bias = true), /model\.layers\.0\.self_attn\.q_proj\.bias'?: missing: the config's attention_bias is true/],
      ['mlp-bias', (c) => (c.mlp_bias = true), /model\.layers\.0\.mlp\.gate_proj\.bias'?: missing: the config's mlp_bias is true/],
      ['bias-str', (c) => (c.attention_bias = 'yes'), /attention_bias "yes" is not supported for llama: expected true or false/],
      ['neg-eps', (c) => (c.rms_norm_eps = -1e-5), /rms_norm_eps must be a positive number, got -0\.00001/],
    ];
    const dirs = cases.map(([n, e]) => variant(`cfg-${n}`, (d) => editConfig(d, e)));
    const emptyTok = variant('empty-tok', (d) => {
      const f = path.join(d, 'tokenizer.json');
      const t = JSON.parse(fs.readFileSync(f, 'utf8')) as { model: { vocab: Record<string, number>; merges: unknown[] } };
      t.model.vocab = {};
      t.model.merges = [];
      fs.writeFileSync(f, JSON.stringify(t));
    });
    const rs = await limit(2, [...dirs.map((d) => () => run(['diff', d])), () => run(['diff', emptyTok, '--prompt', 'hello'])]);
    cases.forEach(([, , re], i) => badInput(rs[i], re));
    badInput(rs[cases.length], /tokenizer\.json: (maps ordinary text .* to no vocabulary token|the vocabulary is empty)/);
  }, 90_000);

  it('tie_word_embeddings: true computes the head as the embedding (as transformers ties it), checked against a float64 product', async () => {
    const tied = variant('tied', (d) => editConfig(d, (c) => (c.tie_word_embeddings = true)));
    const dump = path.join(tmp, 'tied-dump');
    const r = await run(['diff', tied, '--dump', dump, '--layers', '3', '--mode', 'accumulated', '--no-drill', '--tokens', '5,17,42']);
    expect(r.code, r.stderr).toBe(0);
    const f32 = (file: string, name: string) => {
      const t = SafetensorsFile.open(file);
      try {
        const info = t.get(name)!;
        const b = t.read(info);
        return { shape: info.shape, data: new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)) };
      } finally {
        t.close();
      }
    };
    /** a [rows, cols] table of the checkpoint, widened exactly to float64 (BF16: the high half of an F32) */
    const table = (name: string) => {
      const ck = Checkpoint.open(tied);
      try {
        const info = ck.info(name);
        const b = ck.read(name);
        expect(info.dtype).toBe('BF16');
        const u16 = new Uint16Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
        const out = new Float64Array(u16.length);
        const word = new Uint32Array(1);
        const asF32 = new Float32Array(word.buffer);
        for (let k = 0; k < u16.length; k++) {
          word[0] = u16[k] << 16;
          out[k] = asF32[0];
        }
        return out;
      } finally {
        ck.close();
      }
    };
    const x = f32(path.join(dump, 'final_norm.safetensors'), 'reference');
    const logits = f32(path.join(dump, 'logits.safetensors'), 'reference');
    const [S, D] = x.shape;
    const V = logits.shape[1];
    const product = (W: Float64Array) => {
      const y = new Float64Array(S * V);
      for (let s0 = 0; s0 < S; s0++) for (let v = 0; v < V; v++) {
        let acc = 0;
        for (let k = 0; k < D; k++) acc += x.data[s0 * D + k] * W[v * D + k];
        y[s0 * V + v] = acc;
      }
      return y;
    };
    const relErr = (a: ArrayLike<number>, b: ArrayLike<number>) => {
      let num = 0;
      let den = 0;
      for (let k = 0; k < a.length; k++) {
        num += (a[k] - b[k]) ** 2;
        den += b[k] ** 2;
      }
      return Math.sqrt(num / den);
    };
    const viaEmbedding = product(table('model.embed_tokens.weight'));
    const viaLmHead = product(table('lm_head.weight'));
    expect(relErr(logits.data, viaEmbedding)).toBeLessThan(1e-5);
    expect(relErr(logits.data, viaLmHead)).toBeGreaterThan(0.1); // the stored lm_head.weight is not what ran
  }, 90_000);

  it('a NaN code (E8M0 0xFF scale) is refused by convert as by diff', async () => {
    const bad = path.join(tmp, 'nan-scale');
    nanWeight(LLAMA_TINY(), bad, 'model.layers.2.mlp.gate_proj.weight');
    const out = path.join(tmp, 'nan-cache');
    const [c, d] = await limit(2, [() => run(['convert', bad, '--fp16-cache', out]), () => run(['diff', bad])]);
    badInput(c, /E8M0 NaN code/);
    badInput(d, /E8M0 NaN code/);
    expect(fs.existsSync(out)).toBe(false);
  }, 90_000);

  it('a NaN stored in a plain BF16 tensor (a norm, the embedding) is refused by convert as by diff, naming the tensor', async () => {
    for (const [name, make] of [
      ['model.layers.1.post_attention_layernorm.weight', (dst: string) => nanWeight(LLAMA_TINY(), dst, 'model.layers.1.post_attention_layernorm.weight')],
      ['model.embed_tokens.weight', (dst: string) => nanEmbedding(LLAMA_TINY(), dst)],
    ] as const) {
      const bad = path.join(tmp, `nan-${name}`);
      make(bad);
      const out = path.join(tmp, `nan-cache-${name}`);
      const [c, d] = await limit(2, [() => run(['convert', bad, '--fp16-cache', out]), () => run(['diff', bad])]);
      badInput(c, new RegExp(`tensor '${name.replace(/\./g, '\\.')}': BF16 NaN at flat index \\d+: a non-finite weight is bad input`));
      badInput(d, new RegExp(`tensor '${name.replace(/\./g, '\\.')}': weight decodes to NaN`));
      expect(fs.existsSync(out)).toBe(false);
    }
  }, 90_000);
});

describe('the trust chain', () => {
  const record = path.join(tmp, 'records', 'accept.json');
  const signed = path.join(tmp, 'records', 'signed.json');
  const gen = (rec: string, extra: string[] = [], e: Record<string, string> = {}) => run(['generate', model, '--record', rec, '--tokens', '1,2,3', '--max-new-tokens', '2', '--temperature', '0', ...extra], e);
  const edited = (name: string, edit: (r: Record<string, unknown>) => void, from = record) => {
    const f = path.join(tmp, 'records', `${name}.json`);
    const r = JSON.parse(fs.readFileSync(from, 'utf8')) as Record<string, unknown>;
    edit(r);
    fs.writeFileSync(f, JSON.stringify(r, null, 2));
    return f;
  };

  beforeAll(async () => {
    const [a, b] = await limit(2, [() => run(['gate', model, '--record', record]), () => run(['gate', model, '--record', signed], { LAYERDIFF_SIGNING_KEY: 'k1' })]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
  }, 300_000);

  it('an internally inconsistent record is locked (exit 3), never an internal error', async () => {
    const recs = [
      edited('hmac-null', (r) => (r.hmac = null)),
      edited('files-null', (r) => ((r.model as { files: unknown[] }).files = [null])),
      edited('prompt-fail', (r) => {
        for (const p of (r.acceptance as { prompts: Array<{ verdict: string }> }).prompts) p.verdict = 'fail';
      }),
      edited('upper-hex', (r) => ((r.model as { fingerprint: string }).fingerprint = (r.model as { fingerprint: string }).fingerprint.toUpperCase().replace('SHA256', 'sha256'))),
      edited('loose-hmac', (r) => ((r.hmac as { value: string }).value = ` ${(r.hmac as { value: string }).value}zz`), signed),
    ];
    const rs = await limit(2, recs.map((f) => () => gen(f, [], { LAYERDIFF_SIGNING_KEY: f.includes('loose') ? 'k1' : '' })));
    for (const r of rs) {
      expect(r.code, r.stderr).toBe(3);
      expect(r.stderr).toMatch(/not a consistent passing layerdiff\.record\/1/);
    }
  }, 120_000);

  it('--require-signature and LAYERDIFF_REQUIRE_SIGNATURE=1 refuse an unsigned record; a stripped signature stays locked', async () => {
    const stripped = edited('stripped', (r) => delete r.hmac, signed);
    const [flag, envReq, strip, ok] = await limit(2, [
      () => gen(record, ['--require-signature']),
      () => gen(record, [], { LAYERDIFF_REQUIRE_SIGNATURE: '1' }),
      () => gen(stripped, ['--require-signature']),
      () => gen(signed, ['--require-signature'], { LAYERDIFF_SIGNING_KEY: 'k1' }),
    ]);
    for (const r of [flag, envReq, strip]) {
      expect(r.code, r.stderr).toBe(3);
      expect(r.stderr).toMatch(/not signed and a signature is required/);
    }
    expect(ok.code, ok.stderr).toBe(0);
  }, 120_000);

  it('the open descriptors are what is hashed: a shard swapped after open is neither read nor vouched for', async () => {
    const dir = variant('swap', () => {});
    const ck = Checkpoint.open(dir);
    try {
      const fd = { racyMs: 0, useCache: false as const };
      const before = await openCheckpointFingerprint(ck, fd);
      expect(before.value).toBe((await checkpointFingerprint(dir, ck.shardFiles, fd)).value);
      const name = 'model.layers.3.mlp.down_proj.weight';
      const original = Buffer.from(ck.read(name));
      // the swap: new bytes written beside the shard and renamed over it, as an attacker racing the gate would
      const shard = path.join(dir, ck.weightMap.get(name)!);
      const b = fs.readFileSync(shard);
      b[ck.info(name).begin] ^= 0xff; // inside the very tensor read above
      fs.writeFileSync(`${shard}.new`, b);
      fs.renameSync(`${shard}.new`, shard);
      // through the checkpoint: the same fingerprint and the same bytes (what was hashed is what is read) …
      expect((await openCheckpointFingerprint(ck, fd)).value).toBe(before.value);
      expect(Buffer.from(ck.read(name)).equals(original)).toBe(true);
      // … while the folder now holds something else, which a by-path check (gate's after-run check) sees
      expect((await checkpointFingerprint(dir, ck.shardFiles, fd)).value).not.toBe(before.value);
    } finally {
      ck.close();
    }
  });

  it('a hand-edited FP16 cache does not unlock: the record binds the cache the gate compared byte for byte', async () => {
    const cache = path.join(tmp, 'trust-fp16');
    const rec = path.join(tmp, 'records', 'cached.json');
    expect((await run(['convert', model, '--fp16-cache', cache])).code).toBe(0);
    const g = await run(['gate', model, '--record', rec, '--fp16-cache', cache]);
    expect(g.code, g.stderr).toBe(0);
    const ok = await gen(rec, ['--fp16-cache', cache, '--json', path.join(tmp, 'records', 'cached-out.json')]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(fs.readFileSync(path.join(tmp, 'records', 'cached-out.json'), 'utf8')).weights).toBe('fp16-cache');
    // the attack: negate model.norm.weight in head.safetensors, then fix its digest and size in manifest.json
    const head = path.join(cache, 'head.safetensors');
    const f = SafetensorsFile.open(head);
    const info = f.get('model.norm.weight')!;
    const { begin, end } = info;
    f.close();
    const b = fs.readFileSync(head);
    for (let i = begin + 1; i < end; i += 2) b[i] ^= 0x80; // F16 little-endian: the sign bit is in the high byte
    fs.writeFileSync(head, b);
    const mf = path.join(cache, 'manifest.json');
    const man = JSON.parse(fs.readFileSync(mf, 'utf8')) as { files: Array<{ name: string; size: number; blake3: string }> };
    const entry = man.files.find((x) => x.name === 'head.safetensors')!;
    entry.blake3 = new Blake3().update(b).hex();
    entry.size = b.length;
    fs.writeFileSync(mf, JSON.stringify(man, null, 2));
    const locked = await gen(rec, ['--fp16-cache', cache]);
    expect(locked.code, locked.stderr).toBe(3);
    expect(locked.stderr).toMatch(/does not vouch for the FP16 cache .*other contents/);
    // and a gate will not vouch for it: its bytes are not what the checkpoint converts to
    badInput(await run(['gate', model, '--record', path.join(tmp, 'records', 'cached-2.json'), '--fp16-cache', cache]), /head\.safetensors: differs from what the checkpoint converts to \(in model\.norm\.weight/);
    expect(fs.existsSync(path.join(tmp, 'records', 'cached-2.json'))).toBe(false);
  }, 300_000);

  it('generate --verify full hashes the FP16 cache too: a forged digest-cache entry for an edited cache file is refused', async () => {
    const cache = path.join(tmp, 'trust-fp16-verify');
    const rec = path.join(tmp, 'records', 'cached-verify.json');
    const e = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'verify-cache') };
    expect((await run(['convert', model, '--fp16-cache', cache], e)).code).toBe(0);
    await new Promise((r) => setTimeout(r, 3100)); // past the racy window: the cache files' digests get cached
    const g = await run(['gate', model, '--record', rec, '--fp16-cache', cache], e);
    expect(g.code, g.stderr).toBe(0);
    expect((await gen(rec, ['--fp16-cache', cache], e)).code).toBe(0);
    // one byte of head.safetensors changed in place, and its digest-cache entry given the file's new stat key
    const head = path.join(cache, 'head.safetensors');
    const f = SafetensorsFile.open(head);
    const at = f.get('model.norm.weight')!.begin + 1;
    f.close();
    const b = fs.readFileSync(head);
    b[at] ^= 0x80;
    fs.writeFileSync(head, b);
    const cf = path.join(e.LAYERDIFF_CACHE_DIR, 'fingerprints.json');
    const c = JSON.parse(fs.readFileSync(cf, 'utf8')) as { entries: Record<string, Record<string, unknown>> };
    const entry = c.entries[`${fs.realpathSync(head)}\0(whole file)`];
    expect(entry).toBeDefined();
    const st = fs.statSync(head, { bigint: true });
    Object.assign(entry, { size: Number(st.size), mtime_ns: String(st.mtimeNs), ctime_ns: String(st.ctimeNs), ino: String(st.ino), dev: String(st.dev) });
    fs.writeFileSync(cf, JSON.stringify(c));
    // without a key the entry is a hint (README, Security model); --verify full hashes the cache's bytes
    expect((await gen(rec, ['--fp16-cache', cache], e)).code).toBe(0);
    badInput(await gen(rec, ['--fp16-cache', cache, '--verify', 'full'], e), /head\.safetensors: does not match the digest in the FP16 cache manifest/);
  }, 300_000);

  it('a forged digest-cache entry does not unlock: MACed with the key, and --verify full re-hashes', async () => {
    // the new file's stat key paired with the old digest (and the old MAC, when there is one)
    const forge = (dir: string, cacheFile: string) => {
      const shard = path.join(dir, shardName(2));
      const b = fs.readFileSync(shard);
      b[b.length - 10] ^= 0x01;
      fs.writeFileSync(shard, b);
      const st = fs.statSync(shard, { bigint: true });
      const c = JSON.parse(fs.readFileSync(cacheFile, 'utf8')) as { entries: Record<string, Record<string, unknown>> };
      const entry = c.entries[fs.realpathSync(shard)];
      expect(entry).toBeDefined();
      Object.assign(entry, { size: Number(st.size), mtime_ns: String(st.mtimeNs), ctime_ns: String(st.ctimeNs), ino: String(st.ino), dev: String(st.dev) });
      fs.writeFileSync(cacheFile, JSON.stringify(c));
    };
    const keyedDir = path.join(tmp, 'forged');
    const plainDir = path.join(tmp, 'forged-nokey');
    copyCheckpoint(model, keyedDir);
    copyCheckpoint(model, plainDir);
    await new Promise((r) => setTimeout(r, 3100)); // past the racy window: the gate's digests get cached
    const eKey = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'forge-cache'), LAYERDIFF_SIGNING_KEY: 'k1' };
    const ePlain = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'forge-cache-2') };
    const recKey = path.join(tmp, 'records', 'forged.json');
    const recPlain = path.join(tmp, 'records', 'forged-nokey.json');
    const gates = await limit(2, [() => run(['gate', keyedDir, '--record', recKey], eKey), () => run(['gate', plainDir, '--record', recPlain], ePlain)]);
    for (const g of gates) expect(g.code, g.stderr).toBe(0);
    forge(keyedDir, path.join(eKey.LAYERDIFF_CACHE_DIR, 'fingerprints.json'));
    forge(plainDir, path.join(ePlain.LAYERDIFF_CACHE_DIR, 'fingerprints.json'));
    const g = (dir: string, rec: string, e: Record<string, string>, extra: string[] = []) => () => run(['generate', dir, '--record', rec, '--tokens', '1,2', '--max-new-tokens', '1', ...extra], e);
    const [keyed, hinted, full] = await limit(2, [g(keyedDir, recKey, eKey), g(plainDir, recPlain, ePlain), g(plainDir, recPlain, ePlain, ['--verify', 'full'])]);
    expect(keyed.code, keyed.stderr).toBe(3);
    expect(keyed.stderr).toMatch(new RegExp(`changed: ${shardName(2).replace(/\./g, '\\.')}`));
    // documented (README, Security model): without a key, whoever can write the cache can forge a hint …
    expect(hinted.code, hinted.stderr).toBe(0);
    // … and --verify full re-hashes every byte
    expect(full.code, full.stderr).toBe(3);
    expect(full.stderr).toMatch(/weights differ/);
  }, 300_000);
});
