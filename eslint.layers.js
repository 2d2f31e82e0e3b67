/**
 * The dependency direction (DESIGN; README "Layers"): core ← reference-cpu / device-hip / reports ←
 * application ← CLI ← scripts. Each unit lists what it must not import; eslint.config.js turns this into
 * one `@typescript-eslint/no-restricted-imports` block per source folder, with every forbidden path spelled
 * relative to that folder (imports here are relative, so a pattern must be too). Tests are exempt: a test
 * compares layers against each other on purpose.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Paths are repository-relative folders, or files without their .ts. The first unit that claims a file wins. */
export const UNITS = [
  { name: 'core', paths: ['harness/errors', 'harness/version', 'harness/rng', 'harness/formats', 'harness/io', 'harness/models', 'harness/faults', 'harness/contracts'] },
  { name: 'reference-cpu', paths: ['reference-cpu'] },
  { name: 'device-hip', paths: ['device-hip'] },
  { name: 'reports', paths: ['reports'] },
  // before application: `inspect --check`'s command module sits beside the check it runs
  { name: 'cli', paths: ['harness/cli', 'harness/weights/command'] },
  { name: 'application', paths: ['harness/arch', 'harness/runner', 'harness/compare', 'harness/weights', 'harness/gate', 'harness/generate', 'harness/repro', 'fixtures'] },
  { name: 'scripts', paths: ['scripts'] },
];

const ABOVE_CORE = ['reference-cpu', 'device-hip', 'reports', 'application', 'cli', 'scripts'];
/** unit → units it must not import; `typeOnly` ones may still be imported with `import type` */
export const FORBIDDEN = {
  core: { units: ABOVE_CORE },
  'reference-cpu': { units: ['device-hip', 'reports', 'application', 'cli', 'scripts'] },
  'device-hip': { units: ['reference-cpu', 'reports', 'application', 'cli', 'scripts'] },
  // The report records (runner/report, runner/run, weights/check) are still declared by the application:
  // reports may read their types but never run application code.
  reports: { units: ['reference-cpu', 'device-hip', 'cli', 'scripts'], typeOnly: ['application'] },
  application: { units: ['cli', 'scripts'] },
  cli: { units: ['scripts'] },
  scripts: { units: [] },
};

const SKIP = new Set(['node_modules', 'dist', 'build', 'test', '.git', 'llama-tiny', 'deepseek-v4-tiny', 'deepseek-v4-tiny-golden']);

function unitOf(p) {
  for (const u of UNITS) if (u.paths.some((q) => p === q || p.startsWith(q + '/'))) return u.name;
  return null;
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A regex over an import specifier written in `fromDir` that reaches `target` (a folder, or a file sans .ts). */
function specifierRegex(fromDir, target) {
  let rel = path.posix.relative(fromDir, target);
  if (!rel.startsWith('..')) rel = './' + rel;
  return `^${escape(rel)}(/|\\.js$|\\.ts$|$)`;
}

/** Folders holding .ts sources (tests excluded), repository-relative. */
function sourceDirs(root, dir = '', out = []) {
  const entries = fs.readdirSync(path.join(root, dir), { withFileTypes: true });
  if (entries.some((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts'))) out.push(dir);
  for (const e of entries) if (e.isDirectory() && !SKIP.has(e.name) && !e.name.startsWith('.')) sourceDirs(root, dir ? `${dir}/${e.name}` : e.name, out);
  return out;
}

function restrictions(fromDir, fromUnit, units, typeOnly) {
  const patterns = [];
  for (const u of UNITS) {
    const banned = units.includes(u.name);
    if (!banned && !typeOnly.includes(u.name)) continue;
    for (const target of u.paths) {
      patterns.push({
        regex: specifierRegex(fromDir, target),
        allowTypeImports: !banned,
        message: `layering: ${fromUnit} must not import ${u.name} (${target}); see eslint.layers.js`,
      });
    }
  }
  return patterns;
}

/** One flat-config block per source folder (a file's rules come from its own folder only). */
export function layeringBlocks(root) {
  const blocks = [];
  for (const dir of sourceDirs(root)) {
    const unitFiles = fs.readdirSync(path.join(root, dir)).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
    const byUnit = new Map();
    for (const f of unitFiles) {
      const u = unitOf(dir ? `${dir}/${f.replace(/\.ts$/, '')}` : f.replace(/\.ts$/, ''));
      if (u === null) continue;
      if (!byUnit.has(u)) byUnit.set(u, []);
      byUnit.get(u).push(dir ? `${dir}/${f}` : f);
    }
    for (const [u, files] of byUnit) {
      const { units, typeOnly = [] } = FORBIDDEN[u];
      const patterns = restrictions(dir, u, units, typeOnly);
      if (patterns.length === 0) continue;
      blocks.push({ files, rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns }] } });
    }
  }
  return blocks;
}
