/**
 * Headless Chromium for the HTML report tests: the DOM after the page's script ran (--dump-dom) and a
 * screenshot. Network and background services are off, and each call gets a fresh profile folder. The
 * tests need the browser (CI installs Debian's `chromium`); they fail, never skip, when it is missing.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';

export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM, 'chromium', 'chromium-browser', 'google-chrome'].filter((x): x is string => x !== undefined && x !== '');
  for (const c of candidates) {
    const r = spawnSync(c, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return c;
  }
  throw new Error('headless Chromium not found: install it (Debian: apt-get install -y --no-install-recommends chromium) or set CHROMIUM=/path/to/chrome');
}

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-extensions', '--hide-scrollbars', '--mute-audio'];

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-chromium-'));
  return new Promise((resolve, reject) => {
    const p = spawn(chromiumPath(), [...FLAGS, `--user-data-dir=${profile}`, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.on('error', reject);
    p.on('close', (code) => {
      clearTimeout(timer);
      fs.rmSync(profile, { recursive: true, force: true });
      resolve({ code: code ?? -1, stdout, stderr });
    });
  });
}

/** The serialized DOM after load and scripts, as Chromium's --dump-dom prints it. */
export async function dumpDom(file: string): Promise<string> {
  const r = await run(['--dump-dom', pathToFileURL(path.resolve(file)).href]);
  if (r.code !== 0 || !r.stdout.includes('<html')) throw new Error(`chromium --dump-dom failed (exit ${r.code}): ${r.stderr.slice(-2000)}`);
  return r.stdout;
}

export async function screenshot(file: string, png: string, size = '1280,2400'): Promise<void> {
  const r = await run([`--screenshot=${path.resolve(png)}`, `--window-size=${size}`, pathToFileURL(path.resolve(file)).href]);
  if (r.code !== 0 || !fs.existsSync(png)) throw new Error(`chromium --screenshot failed (exit ${r.code}): ${r.stderr.slice(-2000)}`);
}
