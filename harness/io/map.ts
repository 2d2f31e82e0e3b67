/**
 * A private, copy-on-write mapping of a file range through the reference's native addon
 * (reference-cpu/native/file_io.cc): for large tensors kept for a whole run (the FP16 cache's weights), where a
 * read would copy every byte into fresh memory whose first touch is the expensive part on a virtual machine.
 * Without the addon, or where the range cannot be mapped, null: the caller reads instead.
 */
import { loadAddon } from './addon.js';

let fn: ((fd: number, offset: number, length: number) => ArrayBuffer | null) | null | undefined;

export function mapRange(fd: number, offset: number, length: number): Uint8Array | null {
  if (fn === undefined) {
    try {
      const a = loadAddon('ld_reference') as { mapRange?: (fd: number, offset: number, length: number) => ArrayBuffer | null };
      fn = typeof a.mapRange === 'function' ? a.mapRange : null;
    } catch {
      fn = null;
    }
  }
  const b = fn === null ? null : fn(fd, offset, length);
  return b === null ? null : new Uint8Array(b);
}
