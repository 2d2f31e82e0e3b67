/**
 * The supervisor's choice of child (harness/cli/supervise.ts): which command lines run in a child, with which
 * GLIBC_TUNABLES, and which outputs it cleans after a signal.
 */
import { describe, expect, it } from 'vitest';
import { childTunables, outputPaths, signalledEnd } from '../cli/supervise.js';

describe('the supervised child', () => {
  it('a command that reads weights gets glibc.malloc.hugetlb=1, added to the caller\'s tunables', () => {
    for (const cmd of ['diff', 'gate', 'generate', 'convert', 'inspect', 'replay']) expect(childTunables([cmd, 'model'], {}, 'linux'), cmd).toBe('glibc.malloc.hugetlb=1');
    expect(childTunables(['diff', 'm', '--color', 'never'], { GLIBC_TUNABLES: 'glibc.malloc.arena_max=2' }, 'linux')).toBe('glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1');
  });

  it('nothing is added for other commands, a caller who set hugetlb, LAYERDIFF_MALLOC=system or another OS', () => {
    expect(childTunables(['fixture', 'llama-tiny', 'out'], {}, 'linux')).toBeUndefined();
    expect(childTunables(['--help'], {}, 'linux')).toBeUndefined();
    expect(childTunables(['diff'], { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' }, 'linux')).toBeUndefined();
    expect(childTunables(['diff'], { GLIBC_TUNABLES: 'a=1:glibc.malloc.hugetlb=2' }, 'linux')).toBeUndefined();
    expect(childTunables(['diff'], { LAYERDIFF_MALLOC: 'system' }, 'linux')).toBeUndefined();
    expect(childTunables(['diff'], {}, 'darwin')).toBeUndefined();
  });

  it('the outputs a command names, as given (its partials are removed after a signal)', () => {
    expect(outputPaths(['diff', 'm', '--json', 'r.json', '--html=r.html', '--summary', '-'])).toEqual(['r.json', 'r.html']);
    expect(outputPaths(['fixture', 'llama-tiny', 'out'])).toEqual(['out']);
    expect(outputPaths(['diff', 'm'])).toEqual([]);
  });

  it('a child ended by a signal: 130 / 143 for an interruption, 128 + the number for others, SIGBUS bad input (exit 2)', () => {
    expect(signalledEnd('SIGINT').code).toBe(130);
    expect(signalledEnd('SIGTERM').code).toBe(143);
    expect(signalledEnd('SIGKILL')).toEqual({ code: 137, line: 'layerdiff: interrupted (SIGKILL); partial outputs removed' });
    const bus = signalledEnd('SIGBUS');
    expect(bus.code).toBe(2);
    expect(bus.line).toMatch(/^layerdiff: error: the run's mapped input became unreadable \(SIGBUS\): .*truncated or rewritten in place.*; partial outputs removed$/);
  });
});
