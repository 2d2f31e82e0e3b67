/**
 * Repro bundles and golden runs, through the real CLI: a bundle holds the failing layer's inputs and raw
 * tensors, and `replay` reproduces the run's metrics exactly; a golden run stores the reference stages with
 * their SHA-256, and a later run against it gives the same numbers without recomputing the reference —
 * and refuses a changed file or another checkpoint with exit 2.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { Checkpoint } from '../io/checkpoint.js';
import { encodeSafetensors, SafetensorsFile } from '../io/safetensors.js';
import type { Report } from '../runner/report.js';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { cli, flipBits, hashTree, LLAMA_TINY } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-repro-'));
const readJson = <T>(f: string) => JSON.parse(fs.readFileSync(f, 'utf8')) as T;
const metricsOf = (r: Report) => r.stages.map((s) => ({ name: s.name, status: s.status, accumulated: s.accumulated, isolated: s.isolated, logits: s.logits ?? null }));

describe('--repro and layerdiff replay', () => {
  const bundle = path.join(tmp, 'bundle');
  const json = path.join(tmp, 'run.json');
  let report: Report;
  beforeAll(() => {
    const r = cli(['diff', '--inject', 'scale-axis@2', '--repro', bundle, '--json', json]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain(`repro: layer.2 exported to ${bundle}`);
    report = readJson<Report>(json);
  });

  it('the bundle holds the manifest, the activations and a mini checkpoint of layer 2 in the real format', () => {
    expect(fs.readdirSync(bundle).sort()).toEqual(['activations.safetensors', 'model', 'repro.json']);
    const m = readJson<{ stage: string; layer: number; tokens: number[]; injected: unknown; files: Record<string, string>; checkpoint: { layer_tensors: string[] } }>(path.join(bundle, 'repro.json'));
    expect(m).toMatchObject({ stage: 'layer.2', layer: 2, tokens: report.input.tokens, injected: { fault: 'scale-axis', layer: 2 } });
    expect(Object.keys(m.files).sort()).toEqual(['activations.safetensors', 'model/config.json', 'model/model-layer.safetensors', 'model/model-rest.safetensors', 'model/model.safetensors.index.json']);
    const acts = SafetensorsFile.open(path.join(bundle, 'activations.safetensors'));
    for (const t of ['reference_input', 'device_input', 'reference_output']) expect(acts.get(t)!.shape).toEqual([report.input.tokens.length, 192]);
    acts.close();
    // raw checkpoint bytes: every tensor of layer 2 (and the non-layer ones), byte for byte, nothing else
    const mini = Checkpoint.open(path.join(bundle, 'model'));
    const orig = Checkpoint.open(LLAMA_TINY());
    try {
      const layer2 = orig.names().filter((n) => n.startsWith('model.layers.2.'));
      expect(m.checkpoint.layer_tensors.sort()).toEqual(layer2.sort());
      expect(mini.names().filter((n) => n.includes('.layers.')).sort()).toEqual(layer2.sort());
      for (const n of mini.names()) {
        const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
        expect(sha(mini.read(n)), n).toBe(sha(orig.read(n)));
        expect(mini.info(n).dtype).toBe(orig.info(n).dtype);
      }
      expect(fs.readFileSync(path.join(bundle, 'model', 'config.json'))).toEqual(fs.readFileSync(path.join(LLAMA_TINY(), 'config.json')));
    } finally {
      mini.close();
      orig.close();
    }
  });

  it('replay reruns just that layer and reproduces the run\'s metrics exactly', () => {
    const out = path.join(tmp, 'replay.json');
    const r = cli(['replay', bundle, '--json', out]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain('reference output: reproduced bit for bit');
    expect(r.stdout).toContain('recorded metrics: reproduced exactly');
    expect(r.stdout).toMatch(/first failing sub-stage: layer\.2\.attn/);
    const rep = readJson<{ accumulated: unknown; isolated: unknown; drill: { first_failing: string } }>(out);
    const st = report.stages.find((s) => s.name === 'layer.2')!;
    expect(rep.accumulated).toEqual(st.accumulated);
    expect(rep.isolated).toEqual(st.isolated);
    // replay reruns the FP16 floor pass as diff runs it: the drill's sub-stage floors are the run's, bit for bit
    expect(rep.drill).toEqual(st.drill);
  });

  it('replay judges against the FP16 floor as diff did: a bug under 0.1 but far above the floor fails there too', () => {
    // llama-tiny's FP16-accumulating GEMM at layer 2: max_abs 0.011, its sub-stages far above their floors (judged by
    // the floor rule alone; replay judged by 0.1 and passed it)
    const ds = path.join(tmp, 'accumulate-bundle');
    const r = cli(['diff', '--no-weights', '--inject', 'fp16-accumulate@2', '--repro', ds, '-q']);
    expect(r.code, r.stderr).toBe(1);
    const m = readJson<{ recorded: { status: string; floor: { isolated: { rms: number } }; free_prefix: number | null } }>(path.join(ds, 'repro.json'));
    expect(m.recorded).toMatchObject({ status: 'fail', free_prefix: null });
    expect(m.recorded.floor.isolated.rms).toBeGreaterThan(0);
    const out = path.join(tmp, 'ds-replay.json');
    const rr = cli(['replay', ds, '--json', out]);
    expect(rr.code, rr.stdout).toBe(1);
    expect(rr.stdout).toContain('recorded metrics: reproduced exactly');
    const rep = readJson<{ isolated: { max_abs: number }; status: string; drill: { first_failing: string | null } }>(out);
    expect(rep.isolated.max_abs).toBeLessThan(0.1);
    expect(rep.drill.first_failing).toMatch(/^layer\.2\./);
    // a recorded drift budget edited to a negative number is refused by name, not judged by
    const mf = path.join(ds, 'repro.json');
    const raw = JSON.parse(fs.readFileSync(mf, 'utf8')) as { recorded: { floor: { accumulated_forced: { rms: number } } } };
    raw.recorded.floor.accumulated_forced.rms = -1;
    fs.writeFileSync(mf, JSON.stringify(raw));
    const e = cli(['replay', ds]);
    expect(e.code).toBe(2);
    expect(e.stderr).toMatch(/recorded\.floor must be null or/);
  });

  it('replay judges the free run\'s flips as diff does: a router choosing without its bias fails the replayed layer', () => {
    // deepseek-v4-tiny, the free run alone: at layer.2 most tokens flip, as scoring bugs; their rows are not the
    // forced run's, so only the flips' judgement (rerun here against the layer's score error) can fail the layer
    const ds = path.join(tmp, 'router-bundle');
    const tokens = Array.from({ length: 96 }, (_, i) => (i * 37 + 11) % 384).join(',');
    const r = cli(['diff', path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny'), '--tokens', tokens, '--no-weights', '--mode', 'accumulated', '--inject', 'router-bias-dropped@2', '--repro', ds, '-q']);
    expect(r.code, r.stderr).toBe(1);
    const rr = cli(['replay', ds]);
    expect(rr.code, rr.stdout).toBe(1);
    expect(rr.stdout).toContain('recorded metrics: reproduced exactly');
  });

  it('replay refuses a bundle whose files changed (exit 2, names the file)', () => {
    const copy = path.join(tmp, 'tampered');
    fs.cpSync(bundle, copy, { recursive: true });
    flipBits(path.join(copy, 'activations.safetensors'), -1);
    const r = cli(['replay', copy]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/activations\.safetensors: bundle file activations\.safetensors does not match its SHA-256/);
  });

  it('replay refuses a hand-edited repro.json naming the field (an unknown fault, a policy that is not one, no tokens, no recorded metrics)', () => {
    for (const [name, edit, says] of [
      ['fault', (m: Record<string, unknown>) => (m.injected = { fault: 'bogus', layer: 1 }), /injected must be null or \{ fault: one of/],
      ['policy', (m: Record<string, unknown>) => (m.policy = 'x'), /policy must be an object/],
      ['policy-value', (m: Record<string, unknown>) => ((m.policy as Record<string, unknown>).floor_ratio = 0), /floor_ratio 0 must be at least 1/],
      ['tokens', (m: Record<string, unknown>) => (m.tokens = []), /tokens must be a non-empty list of token ids/],
      ['recorded', (m: Record<string, unknown>) => (m.recorded = null), /recorded must be an object/],
      ['mode', (m: Record<string, unknown>) => (m.mode = 'sideways'), /mode must be one of/],
    ] as const) {
      const copy = path.join(tmp, `edited-${name}`);
      fs.cpSync(bundle, copy, { recursive: true });
      const mf = path.join(copy, 'repro.json');
      const m = JSON.parse(fs.readFileSync(mf, 'utf8')) as Record<string, unknown>;
      edit(m);
      fs.writeFileSync(mf, JSON.stringify(m));
      const r = cli(['replay', copy]);
      expect(r.code, `${name}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(says);
    }
  });

  it('a passing run writes no bundle and says so; a non-empty target is refused before the run', () => {
    const target = path.join(tmp, 'never');
    const r = cli(['diff', '--repro', target]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/--repro .*: the run passed; no bundle written/);
    expect(fs.existsSync(target)).toBe(false);
    const full = path.join(tmp, 'full');
    fs.mkdirSync(full);
    fs.writeFileSync(path.join(full, 'keep.txt'), 'mine');
    const r2 = cli(['diff', '--inject', 'nibble-swap', '--repro', full]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/--repro: the folder is not empty/);
    expect(fs.readdirSync(full)).toEqual(['keep.txt']);
  });
});

describe('--save-golden and --golden', () => {
  const golden = path.join(tmp, 'golden');
  const fresh = path.join(tmp, 'fresh.json');
  beforeAll(() => {
    const r = cli(['diff', '--save-golden', golden, '--json', fresh]);
    expect(r.code, r.stderr).toBe(0);
  });

  it('stores every reference stage with its SHA-256 and the model fingerprint', () => {
    const m = readJson<{ model: { fingerprint: string }; stages: Array<{ name: string; file: string; sha256: string }> }>(path.join(golden, 'golden.json'));
    expect(m.model.fingerprint).toBe(readJson<Report>(fresh).model.fingerprint);
    expect(m.stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits']);
    for (const s of m.stages) expect(createHash('sha256').update(fs.readFileSync(path.join(golden, s.file))).digest('hex')).toBe(s.sha256);
    const l1 = SafetensorsFile.open(path.join(golden, 'layer.1.safetensors'));
    expect([...l1.tensors.keys()].sort()).toEqual(['reference', 'substage.attn', 'substage.mlp']);
    l1.close();
  });

  it('a run against the golden gives the same numbers as one that computes the reference', () => {
    const out = path.join(tmp, 'vs-golden.json');
    const r = cli(['diff', '--golden', golden, '--json', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`reference: golden run ${golden} (not recomputed)`);
    const a = readJson<Report>(fresh);
    const b = readJson<Report>(out);
    expect(metricsOf(b)).toEqual(metricsOf(a));
    expect(b.golden).toEqual({ dir: golden, action: 'compared' });
    // and a device bug is still caught against it, with its cause and drill-down
    const bad = cli(['diff', '--golden', golden, '--inject', 'nibble-swap@3', '--json', out]);
    expect(bad.code).toBe(1);
    const c = readJson<Report>(out);
    expect(c.first_failure).toBe('layer.3');
    expect(c.diagnosis[0]).toMatchObject({ cause: 'nibble-swap', substage: 'layer.3.mlp' });
  });

  it('the reference really comes from the files: a re-hashed edit shows in the metrics', () => {
    const edited = path.join(tmp, 'golden-edited');
    fs.cpSync(golden, edited, { recursive: true });
    const f = path.join(edited, 'embed.safetensors');
    const st = SafetensorsFile.open(f);
    const info = st.get('reference')!;
    const data = new Float32Array(st.read(info).buffer.slice(0));
    st.close();
    data[0] += 1; // the reference now disagrees with the device by exactly 1 at [0, 0]
    const bytes = encodeSafetensors([{ name: 'reference', dtype: 'F32', shape: info.shape, data: new Uint8Array(data.buffer) }], { format: 'pt', stage: 'embed' });
    fs.writeFileSync(f, bytes);
    const mf = path.join(edited, 'golden.json');
    const m = readJson<{ stages: Array<{ name: string; sha256: string }> }>(mf);
    m.stages.find((s) => s.name === 'embed')!.sha256 = createHash('sha256').update(bytes).digest('hex');
    fs.writeFileSync(mf, JSON.stringify(m));
    const out = path.join(tmp, 'edited.json');
    const r = cli(['diff', '--golden', edited, '--layers', 'all', '--json', out]);
    expect(r.code).toBe(1);
    const e = readJson<Report>(out).stages[0];
    expect(e.name).toBe('embed');
    expect(e.accumulated!.max_abs).toBe(1);
    expect(e.accumulated!.max_at).toEqual([0, 0]);
  });

  it('a changed stage file or another checkpoint is refused with exit 2', () => {
    const broken = path.join(tmp, 'golden-broken');
    fs.cpSync(golden, broken, { recursive: true });
    const f = path.join(broken, 'layer.2.safetensors');
    const b = fs.readFileSync(f);
    b[b.length - 4] ^= 0x40;
    fs.writeFileSync(f, b);
    const r = cli(['diff', '--golden', broken]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/layer\.2\.safetensors: golden stage layer\.2 does not match its SHA-256/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);

    const other = path.join(tmp, 'overflow-model');
    writeLlamaTiny(other, { variant: 'overflow' });
    const r2 = cli(['diff', other, '--golden', golden]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/--golden was saved from another checkpoint/);
  });

  it('a layer range is saved with its input and replayed on the same range only', () => {
    const g = path.join(tmp, 'golden-1-2');
    const a = path.join(tmp, 'range-a.json');
    const b = path.join(tmp, 'range-b.json');
    expect(cli(['diff', '--layers', '1-2', '--save-golden', g, '--json', a]).code).toBe(0);
    expect(fs.readdirSync(g).sort()).toEqual(['golden.json', 'input.safetensors', 'layer.1.safetensors', 'layer.2.safetensors']);
    const before = hashTree(g);
    expect(cli(['diff', '--golden', g, '--json', b]).code).toBe(0);
    expect(metricsOf(readJson<Report>(b))).toEqual(metricsOf(readJson<Report>(a)));
    expect(hashTree(g)).toBe(before);
    const r = cli(['diff', '--golden', g, '--layers', '0-3']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/the golden run holds layers 1-2/);
  });
});
