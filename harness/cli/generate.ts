/**
 * `layerdiff generate <model> --prompt TEXT … --record FILE`: text generation.
 *   --path device (default): the optimized path — FP16 weights built once (or read from --fp16-cache),
 *     K/V cache, incremental decoding, prompts batched — on the device backend. It runs only under a
 *     passing acceptance record that matches this checkpoint, device, policy and tool (harness/gate/record.ts);
 *     otherwise exit 3 with what differs and the gate command that fixes it.
 *     DeepSeek-V4: device-hip/deepseek_v4_decode.ts (window ring, compressor states and entries, indexer);
 *     FP16 weights dequantized on first use or read from --fp16-cache (routed experts: when first routed to),
 *     prompts prefilled in one pass.
 *   --path reference: the FP32 reference, always allowed (slow; DeepSeek-V4 by full recompute).
 * Output: with one prompt the continuation is streamed to stdout as it is produced; with several, one
 * line per token `[i] "<text>"` while decoding, then each completion in full. Statistics go to stderr.
 */
import { randomInt } from 'node:crypto';
import * as path from 'node:path';
import { resolvePolicy } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { openCheckpointFingerprint } from '../gate/fingerprint.js';
import { type AcceptanceRecord, gatedTokens, readRecordText, RecordMismatch, signatureRequired, signingKey, verifyRecord } from '../gate/record.js';
import { deferredFingerprint, type RecordedModel } from '../gate/deferred.js';
import { cacheListDigest, type Fp16ManifestBase, MANIFEST, readManifestText } from '../generate/fp16cache.js';
import { generate, type GenerateResult, TextStream } from '../generate/engine.js';
import { eosIds, resolveSampling, unappliedDecoding } from '../generate/generation_config.js';
import { Checkpoint } from '../io/checkpoint.js';
import { assertDistinctPaths, checkOutputs, writeFileAtomic } from '../io/writer.js';
import { printable } from '../io/printable.js';
import { hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { selectBackend } from '../runner/backend.js';
import { backendBuild } from '../runner/build.js';
import { type Architecture, architectureFor, type OpenedDecoder } from '../arch/registry.js';
import { gateCommand, shq } from './gate.js';
import { MAX_PROMPT_CHARS, maxPositions, parseTokenIds } from './input.js';

/** The position limit of a config that states no max_position_embeddings (documented in the README). */
const MAX_POSITIONS_UNSTATED = 1 << 16;

export interface GenerateArgs {
  model: string;
  prompt: string[];
  tokens: string[];
  record?: string;
  maxNewTokens: number;
  /** sampling flags; each not given comes from generation_config.json, else transformers' defaults (generate/generation_config.ts) */
  temperature?: number;
  topP?: number;
  topK?: number;
  repetitionPenalty?: number;
  seed?: number;
  path: string;
  fp16Cache?: string;
  device: string;
  /** the policy (compare/policy.ts resolvePolicy): a file, or the fixed-rule flags, or the default */
  policy?: string;
  metric?: string;
  failAbove?: number;
  warnAbove?: number;
  /** write prompts, tokens, texts, finish reasons and timings as JSON */
  json?: string;
  /** refuse unsigned acceptance records */
  requireSignature?: boolean;
  /** 'full': re-hash every checkpoint byte instead of trusting the digest cache; default 'cached' */
  verify?: string;
  /** refuse (exit 3) a run that feeds a sequence longer than the gate's longest prompt, instead of noting it */
  withinGated?: boolean;
}

export interface GenerateOutcome {
  code: ExitCode;
  prompts: number[][];
  result: GenerateResult;
  texts: string[] | null;
  seed: number;
  weights: 'fp16-cache' | 'dequant-at-load' | 'fp32-reference';
  record: AcceptanceRecord | null;
}



export async function runGenerate(a: GenerateArgs, io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } = process): Promise<GenerateOutcome> {
  if (a.verify !== undefined && a.verify !== 'cached' && a.verify !== 'full') throw new InputError(`--verify ${a.verify}: expected cached or full`);
  if (a.path !== 'device' && a.path !== 'reference') throw new InputError(`--path ${a.path}: expected device or reference`);
  if (!Number.isSafeInteger(a.maxNewTokens) || a.maxNewTokens < 1) throw new InputError(`--max-new-tokens ${a.maxNewTokens}: expected a positive integer`);
  if (a.seed !== undefined && (!Number.isSafeInteger(a.seed) || a.seed < 0 || a.seed > 0xffffffff)) throw new InputError(`--seed ${a.seed}: expected an integer in [0, 2^32)`);
  const seed = a.seed ?? randomInt(0, 2 ** 32 - 1);
  const policy = resolvePolicy(a);
  if (a.prompt.length + a.tokens.length === 0) throw new InputError('give at least one --prompt TEXT (or --tokens 1,2,3)');
  for (const p of a.prompt) if (p.length > MAX_PROMPT_CHARS) throw new InputError(`--prompt has ${p.length} characters; the limit is ${MAX_PROMPT_CHARS}`);
  checkOutputs(a.model, [{ option: '--json', path: a.json, kind: 'file' }]);
  assertDistinctPaths([{ option: '--json', path: a.json, kind: 'file' }], [
    { option: '--record', path: a.record, kind: 'file' }, { option: '--policy', path: a.policy, kind: 'file' }, { option: '--fp16-cache', path: a.fp16Cache, kind: 'dir' },
  ]);
  if (a.path === 'reference' && a.fp16Cache !== undefined) throw new InputError('--fp16-cache is for --path device');
  if (a.path === 'reference' && a.withinGated === true) throw new InputError('--within-gated is for --path device (the reference path runs without a record)');

  const ck = Checkpoint.open(a.model);
  /** the decoder and what it holds open (an FP16 cache's files), closed with the checkpoint */
  let opened: OpenedDecoder | null = null;
  try {
    const { sampling, source: samplingSource } = resolveSampling({ temperature: a.temperature, topP: a.topP, topK: a.topK, repetitionPenalty: a.repetitionPenalty }, ck);
    const entry = architectureFor(ck);
    // Unlock first (before reading tokenizers or weights): a locked path costs nothing but the fingerprint.
    let record: AcceptanceRecord | null = null;
    let fingerprint: string | null = null;
    let fp16CacheDigest: string | null | undefined;
    let shardPins: Map<string, string> | null = null;
    const backend = a.path === 'device' ? selectBackend(a.device) : null;
    if (backend !== null) {
      // the tokenizer's bytes are read now, so the fingerprint covers the very bytes it is built from
      if (hasTokenizer(ck.dir)) for (const f of ['tokenizer.json', 'tokenizer_config.json']) ck.readMeta(f);
      // and DeepSeek-V4's inference/config.json (its forward pass's second config file), where there is one
      ck.readMeta('inference/config.json');
      // pinned before they are hashed: a shard written after this is caught after the next forward pass (afterForward)
      shardPins = ck.shardIdentities();
      // the record is read once: what decides how the checkpoint is fingerprinted is what is verified
      const recordText = readRecordText(a.record);
      const deferred = a.fp16Cache !== undefined && a.verify !== 'full' && recordText !== null ? fingerprintForCache(ck, recordText, a.fp16Cache, (t) => io.stderr.write(t)) : null;
      const fp = deferred ?? await openCheckpointFingerprint(ck, { useCache: a.verify === 'full' ? 'write' : true });
      fingerprint = fp.value;
      record = verifyRecord({
        recordFile: a.record, recordText: recordText ?? undefined, modelDir: ck.dir, fingerprint: fp, device: backend.identity, build: backendBuild(backend), policy, key: signingKey(), requireSignature: signatureRequired(a.requireSignature),
        fixCommand: gateCommand(a.model, a.record ?? 'acceptance.json', a.device, policy),
        newRecordCommand: (rec) => gateCommand(a.model, rec, a.device, policy),
      });
      if (a.fp16Cache !== undefined) fp16CacheDigest = boundCacheDigest(a.fp16Cache, fp.value, record, gateCommand(a.model, a.record ?? 'acceptance.json', a.device, policy));
      const how = typeof fp16CacheDigest === 'string' ? `, FP16 cache vouched for${deferred !== null ? '; the checkpoint\'s shards checked by header and sample, their data hashed only if read' : ''}` : '';
      io.stderr.write(`layerdiff: optimized path unlocked by ${a.record} (gate passed ${record.created}, ${record.acceptance.prompts.length} prompts, ${backend.identity.name}${how})\n`);
    }

    const tk = hasTokenizer(ck.dir) ? loadTokenizer(ck.dir, (n) => ck.readMeta(n)) : null;
    if (a.prompt.length > 0 && tk === null) throw new InputError('--prompt needs a tokenizer.json in the model directory; use --tokens', { file: ck.dir });
    const vocab = typeof ck.config.vocab_size === 'number' ? ck.config.vocab_size : Infinity;
    const prompts = [...a.prompt.map((p) => tk!.encode(p)), ...a.tokens.map((t) => parseTokenIds(t, vocab))];
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new InputError(`prompt ${i + 1} has no tokens`);
      for (const t of p) if (t >= vocab) throw new InputError(`prompt ${i + 1}: token id ${t} is outside the vocabulary [0, ${vocab})`);
    });

    // Positions past max_position_embeddings are not the model's (and the gate never validated them). The last new
    // token is chosen, never fed back: a run uses positions 0 … prompt + new − 2.
    const maxPos = maxPositions(ck.dir) ?? MAX_POSITIONS_UNSTATED;
    const longestPrompt = Math.max(...prompts.map((p) => p.length));
    if (longestPrompt > maxPos) throw new InputError(`a ${longestPrompt}-token prompt is longer than max_position_embeddings ${maxPos} itself`, { file: ck.configFile });
    if (longestPrompt + a.maxNewTokens - 1 > maxPos) {
      throw new InputError(`--max-new-tokens ${a.maxNewTokens}: a ${longestPrompt}-token prompt plus ${a.maxNewTokens} new tokens exceeds max_position_embeddings ${maxPos}; give at most ${Math.max(0, maxPos - longestPrompt + 1)}`);
    }
    if (record !== null) beyondTheGate(record, entry, ck, longestPrompt + a.maxNewTokens - 1, a, io);
    const unapplied = unappliedDecoding(ck, sampling.temperature > 0);
    if (unapplied.length > 0) io.stderr.write(`layerdiff: note: generation_config.json sets ${unapplied.join(', ')}, which generate does not apply (one sequence per prompt, decoded as the next line says): its text may differ from transformers' generate\n`);
    io.stderr.write(`layerdiff: ${sampling.temperature === 0 ? 'greedy' : `sampling at temperature ${sampling.temperature}, top-k ${sampling.topK === 0 ? 'off' : sampling.topK}, top-p ${sampling.topP}`}, repetition penalty ${sampling.repetitionPenalty} (${samplingSource})\n`);

    const t0 = performance.now();
    opened = await entry.decoder({ ck, backend, fingerprint, fp16Cache: a.fp16Cache, fp16CacheDigest, verifyFull: a.verify === 'full', model: a.model, note: (t) => io.stderr.write(t) });
    const { decoder, weights } = opened;
    const loadMs = performance.now() - t0;

    const B = prompts.length;
    const decode = (ids: number[]) => (tk !== null ? tk.decode(ids, { skipSpecialTokens: true }) : ids.join(' ') + ' ');
    const streams = prompts.map(() => new TextStream(decode));
    let midLine = false; // a streamed line not yet ended: a run stopped by an error ends it before the error line
    const gen = (o: Parameters<typeof generate>[2]) => {
      try {
        return generate(decoder, prompts, o);
      } catch (e) {
        if (midLine) io.stdout.write('\n');
        throw e;
      }
    };
    // on a terminal, a decoded token's control characters (a tokenizer's ESC sequences) are shown, not obeyed;
    // a pipe or a file gets the text as decoded
    const shownText = (t: string) => ((io.stdout as { isTTY?: boolean }).isTTY === true ? printable(t, true) : t);
    const result = gen({
      maxNewTokens: a.maxNewTokens, sampling, seed, eos: eosIds(ck, tk?.eosTokenId),
      // a shard the record vouched for, or an FP16 cache file, edited in place while generating stops the run before
      // a token is chosen from what the forward pass computed
      afterForward: () => {
        if (shardPins !== null) ck.unchangedSince(shardPins);
        opened?.unchanged?.();
      },
      onToken: (seq, tok) => {
        const delta = streams[seq].push(tok);
        if (B === 1) {
          if (delta !== '') io.stdout.write(shownText(delta));
          midLine ||= delta !== '';
        } else if (delta !== '') {
          io.stdout.write(`[${seq + 1}] ${JSON.stringify(delta)}\n`);
        }
      },
    });
    const texts = tk !== null ? result.tokens.map((ids) => decode(ids)) : null;
    if (B === 1) io.stdout.write(shownText(streams[0].flush()) + '\n');
    else {
      result.tokens.forEach((ids, i) => {
        const shown = a.prompt[i] ?? a.tokens[i - a.prompt.length];
        io.stdout.write(`=== [${i + 1}] ${JSON.stringify(shown.length > 60 ? shown.slice(0, 57) + '...' : shown)} (${result.finish[i]})\n${shownText(texts?.[i] ?? ids.join(' '))}\n`);
      });
    }
    const n = result.tokens.reduce((s, t) => s + t.length, 0);
    const decodeRate = result.decodeMs > 0 ? (n - B) / (result.decodeMs / 1000) : 0;
    const how = backend !== null ? `device ${backend.identity.name}, FP16 weights ${weights === 'fp16-cache' ? 'from the cache' : 'dequantized at load'}, ${opened.how}` : `reference FP32, ${opened.how}`;
    io.stderr.write(
      `layerdiff: ${n} tokens for ${B} prompt${B > 1 ? 's' : ''} · load ${loadMs.toFixed(0)} ms · prefill ${result.prefillMs.toFixed(0)} ms · decode ${decodeRate.toFixed(1)} tok/s · seed ${seed} · ${how}\n`,
    );
    if (a.json !== undefined) {
      writeFileAtomic(a.json, JSON.stringify({
        schema: 'layerdiff.generation/1', path: a.path, weights, seed, sampling, max_new_tokens: a.maxNewTokens,
        // the longest sequence fed (a prompt and its new tokens but the last, which is chosen, not fed), and the gate's
        // longest prompt (positions past it were not compared)
        sequence_tokens: Math.max(...prompts.map((p, i) => p.length + result.tokens[i].length - 1)), gated_tokens: record !== null ? gatedTokens(record) : null,
        record: a.path === 'device' ? path.resolve(a.record!) : null,
        outputs: prompts.map((p, i) => ({ prompt_tokens: p, tokens: result.tokens[i], text: texts?.[i] ?? null, finish: result.finish[i] })),
        timing_ms: { load: loadMs, prefill: result.prefillMs, decode: result.decodeMs },
      }, null, 2) + '\n', '--json');
    }
    return { code: ExitCode.pass, prompts, result, texts, seed, weights, record };
  } finally {
    opened?.close();
    ck.close();
  }
}

/**
 * A run whose longest sequence (`reach` tokens fed: the prompt and every new token but the last) is longer than the
 * gate's longest prompt runs positions the gate never compared, and may cross a length at which the model starts to do
 * something the gated prompts never made it do (Architecture.lengthRegimes). Said on stderr, or refused with
 * --within-gated (exit 3: the record does not cover the run).
 */
function beyondTheGate(record: AcceptanceRecord, entry: Architecture, ck: Checkpoint, reach: number, a: GenerateArgs, io: { stderr: NodeJS.WritableStream }): void {
  const gated = gatedTokens(record);
  if (reach <= gated) return;
  const crossed = (entry.lengthRegimes?.(ck) ?? []).filter((r) => r.tokens > gated && r.tokens <= reach);
  const what = `this run feeds sequences of up to ${reach} tokens and the gate compared up to ${gated} (its longest prompt)${crossed.length > 0 ? `; past ${gated}, ${crossed.map((r) => `at ${r.tokens} ${r.what}`).join('; ')}` : ''}`;
  if (a.withinGated === true) {
    const fewer = gated - (reach - a.maxNewTokens);
    throw new RecordMismatch(`the record does not cover this run: ${what}. Give ${fewer >= 1 ? `--max-new-tokens ${fewer} or fewer` : 'a shorter prompt'}, or gate a prompt of ${reach} tokens or more`, ['length']);
  }
  io.stderr.write(`layerdiff: note: ${what}; positions past ${gated} were not compared (--within-gated refuses such a run)\n`);
}

/**
 * The checkpoint's fingerprint for a run whose weights all come from the FP16 cache at `dir` (harness/gate/deferred.ts:
 * shards checked by size, header and data sample, their data hashed only if read), or null for the full fingerprint: the record
 * has no header and sample digests, a shard differs from it, or the cache is not this record's checkpoint's (no manifest, or
 * one of another fingerprint: the run would then dequantize the checkpoint, and reads all of it).
 */
function fingerprintForCache(ck: Checkpoint, recordText: string, dir: string, note: (line: string) => void) {
  let model: RecordedModel;
  let man: Fp16ManifestBase | null;
  try {
    model = (JSON.parse(recordText) as { model?: RecordedModel }).model ?? {};
    const text = readManifestText(dir);
    man = text === null ? null : (JSON.parse(text) as Fp16ManifestBase);
  } catch {
    return null; // verifyRecord, or the cache's loader, names what is wrong
  }
  if (typeof model.fingerprint !== 'string' || man?.checkpoint?.fingerprint !== model.fingerprint) return null;
  return deferredFingerprint(ck, model, { note });
}

/**
 * The FP16 cache `generate --fp16-cache DIR` is to read must be the one the record vouches for
 * (`gate --fp16-cache DIR`: every byte compared with the checkpoint): its manifest's list digest is the
 * record's `fp16_cache.files_digest`, and every file is then checked against the manifest as it is read.
 * Returns that digest (the loader re-checks it), or null where the loader should not use the cache anyway (no
 * manifest, or one of another checkpoint: it notes that and dequantizes the validated weights): the loader then
 * refuses a manifest it finds current (swapped in between the two reads) instead of using it unchecked.
 */
function boundCacheDigest(dir: string, fingerprint: string, record: AcceptanceRecord, fix: string): string | null {
  const mf = path.join(dir, MANIFEST);
  const text = readManifestText(dir);
  if (text === null) return null;
  let man: Fp16ManifestBase & { experts?: unknown[] };
  try {
    man = JSON.parse(text) as typeof man;
  } catch {
    return null; // the loader names it
  }
  if (man?.checkpoint?.fingerprint !== fingerprint) return null;
  const digest = cacheListDigest(man, mf);
  if (record.fp16_cache?.files_digest !== digest) {
    const why = record.fp16_cache === undefined ? 'the record was written without gate --fp16-cache' : `it vouches for ${record.fp16_cache.path} with other contents`;
    throw new RecordMismatch(`the optimized path is locked: the acceptance record does not vouch for the FP16 cache ${dir} (${why}). To unlock it, run: ${fix} --fp16-cache ${shq(dir)}`, ['fp16-cache']);
  }
  return digest;
}

