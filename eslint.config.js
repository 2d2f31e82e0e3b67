import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { layeringBlocks } from './eslint.layers.js';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'device-hip/build/**', 'fixtures/llama-tiny/**', 'fixtures/deepseek-v4-tiny/**', 'fixtures/gpt-oss-tiny/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', performance: 'readonly' } },
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
    },
  },
  ...layeringBlocks(import.meta.dirname),
);
