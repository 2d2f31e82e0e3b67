/**
 * The architecture registry (harness/arch/registry.ts): each bundled checkpoint finds its entry, an entry's
 * declared sub-stage names are the ones both of its paths record (in forward order), every fixture kind belongs
 * to exactly one entry, and an architecture no entry matches is bad input naming config.json.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ARCHITECTURE_ENTRIES, architectureFor } from '../arch/registry.js';
import { InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { selectBackend } from '../runner/backend.js';
import { substageOrder } from '../runner/run.js';
import { packageRoot } from '../version.js';
import { FIXTURE_KINDS } from '../../fixtures/generate.js';

const bundled = [
  { dir: 'llama-tiny', name: 'llama' },
  { dir: 'deepseek-v4-tiny', name: 'deepseek_v4' },
  { dir: 'gpt-oss-tiny', name: 'gpt_oss' },
];

describe('architecture registry', () => {
  for (const b of bundled) {
    it(`${b.dir}: its entry is ${b.name}, and both paths record exactly the entry's sub-stages, in its order`, () => {
      const ck = Checkpoint.open(path.join(packageRoot(), 'fixtures', b.dir));
      try {
        const entry = architectureFor(ck);
        expect(entry.name).toBe(b.name);
        expect(entry.fixtures).toContain(b.dir);
        const model = entry.open(ck, selectBackend('emulated'), null);
        expect(model.architecture).toBe(entry.name);
        const tokens = [1, 5, 9, 2];
        const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
        const w = model.loadLayer(0);
        const x = model.reference.embed(tokens);
        for (const p of [model.reference, model.device]) {
          const r = p.layer(0, x, w, ctx);
          const names = Object.keys(r.substages ?? {});
          expect(substageOrder(names)).toEqual([...entry.substages]);
        }
      } finally {
        ck.close();
      }
    });
  }

  it('gpt_oss on a backend without its ops (hip, for now): the device path refuses with bad input, the reference runs', () => {
    const ck = Checkpoint.open(path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny'));
    try {
      const emulated = selectBackend('emulated');
      const model = architectureFor(ck).open(ck, { ...emulated, gptOss: null, identity: { ...emulated.identity, name: 'hip' } }, null);
      const tokens = [1, 2, 3];
      const x = model.reference.embed(tokens);
      expect(() => model.device.embed(tokens)).toThrow(/hip backend.*--device emulated/);
      expect(() => model.device.layer(0, x, model.loadLayer(0), { tokens, positions: [0, 1, 2], forcedSelections: null })).toThrow(InputError);
    } finally {
      ck.close();
    }
  });

  it('names are unique, and every fixture kind belongs to exactly one entry', () => {
    const names = ARCHITECTURE_ENTRIES.map((a) => a.name);
    expect(new Set(names).size).toBe(names.length);
    const owned = ARCHITECTURE_ENTRIES.flatMap((a) => a.fixtures);
    expect(new Set(owned).size).toBe(owned.length);
    expect([...owned].sort()).toEqual(Object.keys(FIXTURE_KINDS).sort());
  });

  it('an architecture no entry matches is bad input naming config.json and the supported ones', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-arch-'));
    try {
      fs.copyFileSync(path.join(packageRoot(), 'fixtures', 'llama-tiny', 'model.safetensors.index.json'), path.join(dir, 'model.safetensors.index.json'));
      for (const f of ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']) fs.symlinkSync(path.join(packageRoot(), 'fixtures', 'llama-tiny', f), path.join(dir, f));
      const cfg = JSON.parse(fs.readFileSync(path.join(packageRoot(), 'fixtures', 'llama-tiny', 'config.json'), 'utf8'));
      fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...cfg, architectures: ['MambaForCausalLM'], model_type: 'mamba' }));
      const ck = Checkpoint.open(dir);
      try {
        let err: unknown;
        try {
          architectureFor(ck);
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(InputError);
        expect(String((err as Error).message)).toMatch(/MambaForCausalLM.*not supported.*LlamaForCausalLM.*DeepseekV4ForCausalLM.*GptOssForCausalLM/);
        expect((err as InputError).file).toBe(path.join(dir, 'config.json'));
      } finally {
        ck.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
