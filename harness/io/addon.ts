/**
 * The native addons' loader, in core because both native users sit beside each other: the device path
 * (`ld_device`, device-hip/src) and the reference's GEMM (`ld_reference`, reference-cpu/native). Both are
 * built by device-hip/binding.gyp (`npm run build:native`).
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { packageRoot } from '../version.js';

/**
 * Load one of the addons that `npm run build:native` (device-hip/binding.gyp) builds. Resolved from the
 * package root, so it works from source (vitest) and from dist/ alike.
 */
export function loadAddon(name: 'ld_device' | 'ld_reference'): unknown {
  const file = path.join(packageRoot(), 'device-hip', 'build', 'Release', `${name}.node`);
  if (!fs.existsSync(file)) throw new Error(`native addon not built: run npm run build:native (missing ${file})`);
  return createRequire(import.meta.url)(file) as unknown;
}
