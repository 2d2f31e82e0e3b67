/**
 * The SHA-256 of several parts at once, each part a list of byte arrays hashed as one concatenation (the FP16
 * cache's routed experts: w1, w2, w3), side by side on `threads` native threads through the reference's addon
 * (reference-cpu/native/sha256_parts.cc, OpenSSL's SHA-256, the one node:crypto computes). Synchronous, so a
 * forward pass can verify the experts a token routes to before it uses them, on every core: one thread hashes
 * ~1.75 GB/s here. Without the addon, node:crypto one part after the other: the same digests, one core.
 */
import { createHash } from 'node:crypto';
import { loadAddon } from './addon.js';

type Native = (parts: Uint8Array[][], threads: number) => string[];
let fn: Native | null | undefined;

function native(): Native | null {
  if (fn === undefined) {
    try {
      const a = loadAddon('ld_reference') as { sha256Parts?: Native };
      fn = typeof a.sha256Parts === 'function' ? a.sha256Parts : null;
    } catch {
      fn = null;
    }
  }
  return fn;
}

/** Hex SHA-256 of each part, in order; `threads` 1 hashes in this thread with node:crypto. */
export function sha256Parts(parts: readonly (readonly Uint8Array[])[], threads: number): string[] {
  const n = native();
  if (n !== null && threads > 1 && parts.length > 1) return n(parts.map((p) => [...p]), threads);
  return parts.map((p) => {
    const h = createHash('sha256');
    for (const b of p) h.update(b);
    return h.digest('hex');
  });
}
