/**
 * The layering is a lint failure, not a convention: an import against the direction in eslint.layers.js
 * fails `npm run lint`. Each probe lints a one-line source as if it were a real file of that folder.
 */
import * as path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../version.js';

const root = packageRoot();
const eslint = new ESLint({ cwd: root });

async function layeringErrors(file: string, code: string): Promise<string[]> {
  const [res] = await eslint.lintText(code + '\nexport const probe = 1;\n', { filePath: path.join(root, file) });
  return res.messages.filter((m) => m.ruleId === '@typescript-eslint/no-restricted-imports').map((m) => m.message);
}

describe('layering lint zones', () => {
  const banned: Array<[string, string, string]> = [
    ['harness/io/config.ts', "import { runStages } from '../runner/run.js';", 'core must not import application'],
    ['harness/formats/dtypes.ts', "import { loadDeviceNative } from '../../device-hip/binding.js';", 'core must not import device-hip'],
    ['harness/errors.ts', "import { renderHtml } from '../reports/html.js';", 'core must not import reports'],
    ['reference-cpu/native.ts', "import { FAULT_CODES } from '../device-hip/binding.js';", 'reference-cpu must not import device-hip'],
    ['device-hip/llama.ts', "import { LlamaReference } from '../reference-cpu/llama.js';", 'device-hip must not import reference-cpu'],
    ['device-hip/deepseek_v4/moe.ts', "import { selectBackend } from '../../harness/runner/backend.js';", 'device-hip must not import application'],
    ['reports/json.ts', "import { diagnose } from '../harness/compare/diagnose.js';", 'reports must not import application'],
    ['harness/runner/run.ts', "import { parseLayers } from '../cli/diff.js';", 'application must not import cli'],
    ['fixtures/generate.ts', "import { runDiffCommand } from '../harness/cli/diff.js';", 'application must not import cli'],
  ];
  for (const [file, code, why] of banned) {
    it(`${file}: ${code} → ${why}`, async () => {
      const errs = await layeringErrors(file, code);
      expect(errs).toHaveLength(1);
      expect(errs[0]).toContain(why);
    });
  }

  const allowed: Array<[string, string]> = [
    ['device-hip/llama.ts', "import { InputError } from '../harness/errors.js';"],
    ['reference-cpu/deepseek_v4/rope.ts', "import { parseDeepseekV4Config } from '../../harness/models/deepseek_v4_config.js';"],
    // the report record's types are still declared by the application; reading them is no dependency
    ['reports/json.ts', "import type { Report } from '../harness/runner/report.js';"],
    ['harness/cli/diff.ts', "import { LlamaReference } from '../../reference-cpu/llama.js';"],
    ['harness/runner/model.ts', "import { LlamaDevice } from '../../device-hip/llama.js';"],
  ];
  for (const [file, code] of allowed) {
    it(`${file}: ${code} is allowed`, async () => {
      expect(await layeringErrors(file, code)).toEqual([]);
    });
  }
});
