/** What this process has mapped of a file, as the kernel accounts it (Linux: /proc/self/smaps). */
import * as fs from 'node:fs';

/** the kB of `file` this process has mapped in: the Rss of each of its mappings of the file */
export function residentKiB(file: string): number {
  let ours = false, kb = 0;
  for (const l of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(l)) ours = l.endsWith(` ${file}`);
    else if (ours && l.startsWith('Rss:')) kb += Number(/\d+/.exec(l)![0]);
  }
  return kb;
}
