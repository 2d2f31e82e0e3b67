/**
 * LAYERDIFF_SIMD (harness/io/addon.ts): both addons' kernels run at the level it names, the report says which, a
 * run at a lower level gives the same numbers (the kernels' own tests hold each level to the others bit for bit;
 * this holds a whole diff to it), and a value it does not know is one line and exit 2.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../version.js';
import { cli, LLAMA_TINY } from './cli.js';

/** What a fresh process that loads both addons under LAYERDIFF_SIMD=level reports for each. */
function levelsUnder(level: string): { device: string; reference: string; blake3: number; vbmi: boolean[]; cpu: { avx2: boolean; avx512: boolean; vbmi: boolean } } {
  const addon = path.join(packageRoot(), 'dist', 'harness', 'io', 'addon.js');
  const script = `
    const { loadAddon } = await import(${JSON.stringify(addon)});
    const d = loadAddon('ld_device'), r = loadAddon('ld_reference');
    const device = d.info().simd, reference = r.info().simd, blake3 = r.blake3Level(); // as loadAddon left them
    const vbmi = [d.info().vbmi, r.info().vbmi];
    const best = d.setSimd('auto');
    console.log(JSON.stringify({ device, reference, blake3, vbmi, cpu: { avx2: best !== 'scalar', avx512: best === 'avx512', vbmi: d.info().vbmi } }));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, LAYERDIFF_SIMD: level } });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as ReturnType<typeof levelsUnder>;
}

describe('LAYERDIFF_SIMD', () => {
  it('sets both addons and BLAKE3 to its level on their first load (lowered to one the CPU has)', () => {
    const s = levelsUnder('scalar');
    expect([s.device, s.reference, s.blake3]).toEqual(['scalar', 'scalar', 0]);
    const a = levelsUnder('avx2');
    const want = a.cpu.avx2 ? 'avx2' : 'scalar';
    expect([a.device, a.reference, a.blake3]).toEqual([want, want, a.cpu.avx2 ? 1 : 0]);
    const auto = levelsUnder('auto');
    expect(auto.reference).toBe(auto.cpu.avx512 ? 'avx512' : auto.cpu.avx2 ? 'avx2' : 'scalar');
    expect(auto.blake3).toBe(auto.cpu.avx512 ? 2 : auto.cpu.avx2 ? 1 : 0);
    expect(auto.vbmi).toEqual([auto.cpu.vbmi, auto.cpu.vbmi]);
    expect(auto.cpu.vbmi, 'VBMI as /proc/cpuinfo says').toBe(fs.existsSync('/proc/cpuinfo') ? /\bavx512vbmi\b/.test(fs.readFileSync('/proc/cpuinfo', 'utf8')) && auto.cpu.avx512 : auto.cpu.vbmi);
    // AVX-512 as a CPU without VBMI runs it: the AVX-512BW kernels, BLAKE3 at its AVX-512 level
    const bw = levelsUnder('avx512');
    expect([bw.device, bw.reference, bw.blake3, bw.vbmi]).toEqual([auto.reference, auto.reference, auto.blake3, [false, false]]);
  });

  it.each([['llama-tiny'], ['deepseek-v4-tiny']])('a diff of %s at the scalar level reports it and gives the numbers of the widest level', (fixture) => {
    const run = (level: string) => {
      const r = cli(['diff', path.join(packageRoot(), 'fixtures', fixture), '--json', '-'], { LAYERDIFF_SIMD: level });
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { backends: { device: { simd?: string } }; stages: Array<{ name: string; isolated: unknown; accumulated: unknown; accumulated_forced: unknown; floor: unknown; substages: unknown }> };
    };
    const wide = run('auto'), scalar = run('scalar');
    expect(scalar.backends.device.simd).toBe('scalar');
    const numbers = (r: typeof wide) => r.stages.map((s) => [s.name, s.isolated, s.accumulated, s.accumulated_forced, s.floor, s.substages]);
    expect(numbers(scalar)).toEqual(numbers(wide));
  });

  it('a value it does not know is one line naming it, exit 2, before any work', () => {
    const r = cli(['diff', LLAMA_TINY()], { LAYERDIFF_SIMD: 'avx3' });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual(["layerdiff: error: LAYERDIFF_SIMD must be one of auto, avx512, avx2, scalar, got 'avx3'"]);
    expect(r.stdout).toBe('');
  });
});
