import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: ['node_modules/**', 'dist/**'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // The native addon and the fixtures are shared; two workers match the CI machine's two cores.
    pool: 'forks',
    maxWorkers: 2,
    // each test file: its own empty LAYERDIFF_CACHE_DIR (fingerprints, reused weights checks)
    setupFiles: ['harness/test/setup-cache.ts'],
    // outputs the emulation writes in full start as all-ones bytes (device-hip/src/op_read.h), so every test of
    // those ops would see an element a kernel failed to write
    env: { LAYERDIFF_POISON_OUTPUTS: '1' },
  },
});
