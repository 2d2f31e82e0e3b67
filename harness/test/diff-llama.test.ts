/**
 * End to end on the bundled llama-tiny fixture: a clean run passes with every stage listed, each injected
 * device-path bug is caught at the right layer, a real FP16 overflow fails where it happens, and reports
 * and dumps hold what DESIGN §7 says.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { SafetensorsFile } from '../io/safetensors.js';
import { packageRoot, toolVersion } from '../version.js';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { scaleBf16Tensor, wrongDtype, wrongShape } from '../../fixtures/inject.js';
import { cli, hashTree, injectedFaultTests, LLAMA_TINY, quietDiff } from './cli.js';

const base = (over: Partial<DiffArgs> = {}): DiffArgs => ({
  model: LLAMA_TINY(), layers: 'all', device: 'auto', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01,
  freeSelection: false, ...over,
});
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-e2e-'));
const quiet = quietDiff;

describe('layerdiff diff on llama-tiny', () => {
  it('a clean run passes and lists embed, every layer, final_norm, logits', async () => {
    const before = hashTree(LLAMA_TINY());
    const { code, report } = await quiet(base());
    expect(report.stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits']);
    expect(report.verdict).toBe('pass');
    expect(code).toBe(0);
    expect(report.first_failure).toBeNull();
    expect(report.backends.device.name).toBe('emulated');
    expect(report.backends.device.description).toMatch(/emulation.*not GPU hardware/);
    for (const s of report.stages) {
      expect(s.accumulated!.max_abs).toBeLessThan(0.1);
      expect(s.isolated!.max_abs).toBeLessThan(0.1);
      // FP16 storage must leave a visible, bounded footprint: the device path is not the reference.
      if (s.name !== 'embed') expect(s.accumulated!.max_abs).toBeGreaterThan(0);
    }
    expect(report.stages.at(-1)!.logits!.accumulated!.top1_agreement).toBe(1);
    expect(hashTree(LLAMA_TINY())).toBe(before);
  });

  // Global decode bugs show first in the first quantized layer (layer 0 is BF16 in this fixture).
  const cases: Array<[string, string]> = [
    ['e3m0-table', 'layer.1'],
    ['nibble-swap', 'layer.1'],
    ['scale-missing', 'layer.1'],
    ['scale-stride', 'layer.1'],
    ['e8m0-as-int', 'layer.1'],
    ['scale-axis@2', 'layer.2'],
    ['scale-missing@3', 'layer.3'],
    ['fp16-overflow@2', 'layer.2'],
    ['nibble-swap@3', 'layer.3'],
  ];
  // a layer-local bug: the isolated error of every other layer stays small
  injectedFaultTests(cases, (inject) => base({ inject }), (s) => expect(s.isolated!.max_abs, s.name).toBeLessThan(0.1));

  it('a checkpoint whose activations really exceed FP16 fails where it happens, with Inf/NaN counts', async () => {
    const dir = path.join(tmp, 'overflow');
    writeLlamaTiny(dir, { variant: 'overflow' });
    const { code, report } = await quiet(base({ model: dir }));
    expect(code).toBe(1);
    expect(report.first_failure).toBe('layer.2');
    const st = report.stages.find((s) => s.name === 'layer.2')!;
    expect(st.accumulated!.inf.device + st.accumulated!.nan.device).toBeGreaterThan(0);
    expect(st.accumulated!.inf.reference + st.accumulated!.nan.reference).toBe(0);
    expect(report.diagnosis[0].cause).toBe('fp16-overflow');
    expect(report.injected).toBeNull();
  });

  it('--layers 1-2 runs only those layers, from the reference input', async () => {
    const { report } = await quiet(base({ layers: '1-2' }));
    expect(report.stages.map((s) => s.name)).toEqual(['layer.1', 'layer.2']);
  });

  it('--json writes the report atomically and --dump writes one safetensors per stage', async () => {
    const json = path.join(tmp, 'r', 'report.json');
    const dump = path.join(tmp, 'dump');
    const { report } = await quiet(base({ json, dump, layers: '2-3' }));
    const onDisk = JSON.parse(fs.readFileSync(json, 'utf8'));
    expect(onDisk.schema).toBe('layerdiff.report/1');
    expect(onDisk.stages.length).toBe(report.stages.length);
    expect(fs.readdirSync(path.dirname(json))).toEqual(['report.json']);
    // run.json says whose run the dump is (layerdiff compare reads it)
    expect(fs.readdirSync(dump).sort()).toEqual(['final_norm.safetensors', 'layer.2.safetensors', 'layer.3.safetensors', 'logits.safetensors', 'run.json']);
    const f = SafetensorsFile.open(path.join(dump, 'layer.2.safetensors'));
    for (const t of ['reference', 'device', 'device_isolated']) expect(f.get(t)!.dtype).toBe('F32');
    expect(f.get('reference')!.shape).toEqual([report.input.tokens.length, 192]);
    f.close();
  });
});

describe('the CLI as a user runs it', () => {
  beforeAll(() => {
    expect(fs.existsSync(LLAMA_TINY())).toBe(true);
  });
  it('diff with no arguments runs the bundled fixture and exits 0', () => {
    const r = cli(['diff']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/layer\.3/);
    expect(r.stdout).toMatch(/PASS/);
    expect(r.stdout.includes('\u001b[')).toBe(false); // no colour when not a TTY
  });
  it('`npx layerdiff` runs the built binary from the checkout (README\'s first command)', () => {
    const r = spawnSync('npx', ['--no-install', 'layerdiff', '--version'], { cwd: packageRoot(), encoding: 'utf8', timeout: 120_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe(toolVersion());
  });
  it('an injected fault exits 1 and the table names the first failure', () => {
    const r = cli(['diff', '--inject', 'scale-axis@2']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/FAIL — first failure: layer\.2/);
    expect(r.stdout).toMatch(/INJECTED FAULT scale-axis@2/);
  });
  it('usage errors exit 2 with one line', () => {
    for (const args of [['diff', '--layers', '9-12'], ['diff', '--inject', 'bogus'], ['diff', '--metric', 'nope'], ['diff', '/nonexistent'], ['frobnicate']]) {
      const r = cli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^layerdiff: error: /);
    }
  });
  it('refuses to write a report inside the model directory', () => {
    const r = cli(['diff', '--json', path.join(LLAMA_TINY(), 'r.json')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/never modifies/);
  });
  it('inspect lists formats and exits 0; --device hip without a GPU exits 2', () => {
    const r = cli(['inspect', LLAMA_TINY()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/mxfp4/);
    expect(r.stdout).toMatch(/fp8-block/);
    const h = cli(['diff', '--device', 'hip']);
    expect(h.code).toBe(2);
    // without ROCm the library is missing; with Debian's hipcc (CI's compile check) it loads but finds no GPU
    expect(h.stderr).toMatch(/^layerdiff: error: --device hip: .*(the HIP runtime was not found|no AMD GPU is visible)/);
  });
  it('--tokens takes decimal ids only: 1e2, 0x10, 1.0, an empty entry and an id past the vocabulary are one line each, exit 2', () => {
    for (const spec of ['1,1e2', '0x10', '3,1.0', '1,,2', '-1', '384']) {
      for (const cmd of [['diff', '--tokens', spec], ['generate', LLAMA_TINY(), '--path', 'reference', '--tokens', spec, '--max-new-tokens', '1']]) {
        const r = cli(cmd);
        expect(r.code, `${cmd[0]} --tokens ${spec}: ${r.stderr}`).toBe(2);
        expect(r.stderr.trim().split('\n')).toHaveLength(1);
        expect(r.stderr).toMatch(/^layerdiff: error: --tokens .*is not a token id in \[0, 384\)/);
      }
    }
  });
  it('a reference that is not finite (a norm scaled to 1e38: FP32 overflows) fails the stage and says why, never a pass by NaN agreeing with NaN', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-ref-nan-'));
    try {
      const dir = path.join(tmp, 'm');
      scaleBf16Tensor(LLAMA_TINY(), dir, 'model.layers.1.input_layernorm.weight', 1e38);
      const json = path.join(tmp, 'r.json');
      const r = cli(['diff', dir, '--json', json]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout.split('\n')[0]).toMatch(/^FAIL layer\.1 unknown: the FP32 reference itself is non-finite \(\d+ NaN, \d+ Inf\)/);
      expect(r.stdout).toMatch(/likely cause at layer\.1: unknown — the FP32 reference itself is non-finite here .* so this stage validates nothing/);
      const rep = JSON.parse(fs.readFileSync(json, 'utf8')) as { verdict: string; stages: Array<{ name: string; status: string }> };
      expect(rep.verdict).toBe('fail');
      expect(rep.stages.find((x) => x.name === 'layer.1')!.status).toBe('fail');
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
  it("inspect's conformance pass checks each norm's shape and dtype without reading it, as diff does (biases go through the same expectShape)", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-inspect-norm-'));
    try {
      for (const [make, says] of [
        [(d: string) => wrongShape(LLAMA_TINY(), d, 'model.layers.1.input_layernorm.weight'), /tensor 'model\.layers\.1\.input_layernorm\.weight': shape \[1,192\] disagrees with the config's \[192\]/],
        [(d: string) => wrongDtype(LLAMA_TINY(), d, 'model.layers.2.post_attention_layernorm.weight', 'I32'), /tensor 'model\.layers\.2\.post_attention_layernorm\.weight': dtype I32 not allowed here/],
      ] as const) {
        const dst = fs.mkdtempSync(path.join(tmp, 'm-'));
        make(dst);
        for (const cmd of [['inspect', dst, '--check'], ['diff', dst]]) {
          const r = cli(cmd);
          expect(r.code, cmd.join(' ')).toBe(2);
          expect(r.stderr.trim().split('\n')).toHaveLength(1);
          expect(r.stderr).toMatch(says);
        }
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
