/** Output writers: every file the tool writes goes through here, so no reader ever sees half a file. */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Write a file atomically: temp file in the same folder, then rename, so no half file is ever seen. */
export function writeFileAtomic(file: string, data: string | Uint8Array): void {
  const dir = path.dirname(file);
  fs.mkdirSync(dir, { recursive: true });
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${Date.now()}.tmp`);
  try {
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}
