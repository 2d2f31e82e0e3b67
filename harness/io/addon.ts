/**
 * The native addons' loader, in core because both native users sit beside each other: the device path
 * (`ld_device`, device-hip/src) and the reference's GEMM (`ld_reference`, reference-cpu/native). Both are
 * built by device-hip/binding.gyp (`npm run build:native`).
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { packageRoot } from '../version.js';

export type SimdLevel = 'auto' | 'avx512' | 'avx2' | 'scalar';
const SIMD_LEVELS: readonly SimdLevel[] = ['auto', 'avx512', 'avx2', 'scalar'];

/**
 * LAYERDIFF_SIMD: the widest SIMD level both addons' kernels use. 'auto' (the default) is the widest the CPU has;
 * 'avx512' runs an AVX-512 machine as one without VBMI runs (Skylake-SP, Cascade Lake: AVX-512BW kernels only),
 * 'avx2' as a host without AVX-512 runs (such as the Zen 3 EPYCs of many MI250 nodes),
 * 'scalar' as one without AVX2. Every level gives the same bits (the tests run each); it changes speed only, so a
 * benchmark or a user can measure what another host kind gets. A value not named here is bad input (exit 2, the CLI
 * checks it before any work).
 */
export function simdLevel(env: NodeJS.ProcessEnv = process.env): SimdLevel {
  const v = env.LAYERDIFF_SIMD;
  if (v === undefined || v === '') return 'auto';
  if (!(SIMD_LEVELS as readonly string[]).includes(v)) throw new InputError(`LAYERDIFF_SIMD must be one of ${SIMD_LEVELS.join(', ')}, got '${v}'`);
  return v as SimdLevel;
}

const leveled = new Set<string>();

/**
 * Load one of the addons that `npm run build:native` (device-hip/binding.gyp) builds. Resolved from the
 * package root, so it works from source (vitest) and from dist/ alike. On its first load an addon is set to
 * LAYERDIFF_SIMD's level (later setSimd calls, the tests', are not undone).
 */
export function loadAddon(name: 'ld_device' | 'ld_reference'): unknown {
  const file = path.join(packageRoot(), 'device-hip', 'build', 'Release', `${name}.node`);
  if (!fs.existsSync(file)) throw new Error(`native addon not built: run npm run build:native (missing ${file})`);
  const addon = createRequire(import.meta.url)(file) as { setSimd?: (l: SimdLevel) => string; blake3Level?: (l: number) => number };
  if (!leveled.has(name)) {
    leveled.add(name);
    const level = simdLevel();
    if (level !== 'auto') {
      addon.setSimd?.(level);
      // BLAKE3's kernels pick their own level (0 scalar, 1 AVX2, 2 AVX-512; one the CPU lacks is lowered)
      if (level !== 'avx512') addon.blake3Level?.(level === 'avx2' ? 1 : 0);
    }
  }
  return addon;
}
