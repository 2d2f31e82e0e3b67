/**
 * What the tool needs of one architecture, in one place (harness/arch/registry.ts lists them). The runner,
 * gate, generate, convert, inspect and replay look the entry up by the checkpoint's config.json and never
 * branch on the architecture's name themselves. Adding an architecture is one entry (README: "Adding an
 * architecture").
 */
import type { Checkpoint } from '../io/checkpoint.js';
import type { Decoder } from '../contracts/decoder.js';
import type { Fp16ManifestBase } from '../generate/fp16cache.js';
import type { ModelDef } from '../models/path.js';
import type { DeviceBackend } from '../runner/backend.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import type { FaultPlan } from '../faults/plan.js';

/** How `generate` is to decode: the optimized device path (with its FP16 weights), or the FP32 reference. */
export interface DecoderRequest {
  ck: Checkpoint;
  /** the device backend for the optimized path; null for the FP32 reference */
  backend: DeviceBackend | null;
  /** the checkpoint's full fingerprint (the FP16 cache is bound to it); set when backend is */
  fingerprint: string | null;
  /** --fp16-cache DIR, when given */
  fp16Cache?: string;
  /**
   * the cache's list digest the acceptance record binds (generate checked it): the loader re-checks it on open.
   * null: generate found no current manifest the record binds, so the loader must not find one either (a manifest
   * swapped between the two reads is refused, not used unchecked); absent outside generate's record check.
   */
  fp16CacheDigest?: string | null;
  /** `--verify full`: every byte of the FP16 cache that is trusted is hashed, none taken from the digest cache */
  verifyFull?: boolean;
  /** a note for stderr (a stale cache, …) */
  note(text: string): void;
  /** the model argument as the user typed it (for the commands a note suggests) */
  model: string;
}

export interface OpenedDecoder {
  decoder: Decoder;
  weights: 'fp16-cache' | 'dequant-at-load' | 'fp32-reference';
  /** how it decodes, for the statistics line (e.g. "KV cache", "full recompute") */
  how: string;
  /** release what the decoder holds open (cache files); the checkpoint is closed by the caller */
  close(): void;
  /** throws when a file the decoder computes from changed since it was verified (CacheStore.unchanged); absent: nothing to check */
  unchanged?: () => void;
}

/** The FP16 cache's manifest as convert reports it: the files verified whole, plus any loaded on first use. */
export type Fp16CacheManifest = Fp16ManifestBase & { experts?: Array<{ size: number }> };

/**
 * A sequence length from which the forward pass does something shorter sequences never make it do (a sliding window
 * dropping its oldest entries, a compressor's first entry, an indexer choosing among its entries): `generate` names
 * those a run reaches past the gate's longest prompt.
 */
export interface LengthRegime {
  /** the sequence length (tokens fed) at which it first happens */
  tokens: number;
  /** what happens, in the config's terms */
  what: string;
}

export interface Architecture {
  /** the family's name: the report's `architecture`, the FP16 cache manifest's */
  name: string;
  /** config.json `architectures[0]` / `model_type` values that select this entry */
  matches: readonly string[];
  /** the sub-stage names a layer records, in forward order (drill-down) */
  substages: readonly string[];
  /** fixture kinds of this architecture (`layerdiff fixture KIND DIR`, fixtures/generate.ts) */
  fixtures: readonly string[];
  /** bind the checkpoint and build both stage paths (weights checked lazily, per layer) */
  open(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<unknown>;
  /** this checkpoint's length regimes (config.json), none when absent: a model whose every position runs the same code */
  lengthRegimes?(ck: Checkpoint): LengthRegime[];
  /** the decoder `generate` runs */
  decoder(r: DecoderRequest): Promise<OpenedDecoder>;
  /**
   * `convert --fp16-cache DIR`: write the optimized path's FP16 weights. `progress(total)` is called once with
   * the number of files, and the function it returns once per file written. `verify` (`gate --fp16-cache`):
   * write nothing, compare the cache already in `dir` with what would be written (generate/fp16cache.ts).
   */
  writeFp16Cache(ck: Checkpoint, N: DeviceNative, dir: string, fingerprint: string, progress: (total: number) => (file: string) => void, verify?: boolean): Promise<Fp16CacheManifest>;
}
