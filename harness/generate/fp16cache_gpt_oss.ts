/**
 * The gpt-oss FP16 cache (fp16cache.ts; issue 13): per layer one file `layer.L.safetensors` holding what the
 * device path dequantizes — the attention and router linears and every routed expert's gate_up and down, as
 * F16 [out, in] (`model.layers.L.mlp.experts.E.gate_up_proj.weight`, …), computed by the device path's own
 * LinearCache — and the layer's small tensors as stored (norms, biases, sinks), so a cached layer is the
 * checkpoint's layer with every linear already FP16 (format 'plain'): the device reads the very bits it would
 * have dequantized. The embedding and head are BF16 in gpt-oss and read from the (validated) checkpoint.
 * Every file is verified whole against the manifest on open.
 */
import type { FingerprintOptions } from '../gate/fingerprint.js';
import type { LinearWeight, StoredTensor } from '../formats/linear.js';
import type { TensorSpec } from '../io/stream_writer.js';
import type { GptOssCheckpoint, GptOssExpert, GptOssLayerWeights } from '../models/gpt_oss.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';
import { CacheStore, f16Bytes, type Fp16ManifestBase, layerFile, openCache, writeCache } from './fp16cache.js';

export interface GptOssFp16Manifest extends Fp16ManifestBase {
  architecture: 'gpt_oss';
}

const files = (layers: number) => Array.from({ length: layers }, (_, L) => layerFile(L));
const expertName = (L: number, e: number, k: 'gate_up_proj' | 'down_proj') => `model.layers.${L}.mlp.experts.${e}.${k}.weight`;
const ATTN = ['q_proj', 'k_proj', 'v_proj', 'o_proj'] as const;
const STORED = ['input_layernorm', 'post_attention_layernorm', 'q_bias', 'k_bias', 'v_bias', 'o_bias', 'sinks', 'router_bias'] as const;

/** The fused expert bias tensors of layer L as stored ([E, 2I] and [E, H]). */
const biasNames = (L: number) => ({ gate_up: `model.layers.${L}.mlp.experts.gate_up_proj_bias`, down: `model.layers.${L}.mlp.experts.down_proj_bias` });

export async function writeGptOssFp16Cache(m: GptOssCheckpoint, N: DeviceNative, dir: string, fingerprint: string, onFile?: (name: string) => void, verify = false): Promise<GptOssFp16Manifest> {
  m.conformance();
  const c = m.cfg;
  const target = { dir, architecture: 'gpt_oss' as const, numLayers: c.layers, fingerprint, checkpointDir: m.ck.dir, onFile, verify };
  return writeCache<GptOssFp16Manifest>(target, (out) => {
    for (let L = 0; L < c.layers; L++) {
      const w = m.loadLayer(L);
      const linears = new LinearCache(N);
      const items: Array<{ spec: TensorSpec; bytes: () => Uint8Array }> = [];
      const lin = (lw: LinearWeight, name = lw.name) => items.push({ spec: { name, dtype: 'F16', shape: [lw.out, lw.in] }, bytes: () => f16Bytes(linears.dequant(lw, null)) });
      const stored = (t: StoredTensor) => items.push({ spec: { name: t.name, dtype: t.dtype, shape: t.shape }, bytes: () => t.bytes });
      for (const k of ATTN) lin(w[k]);
      lin(w.router);
      for (const k of STORED) stored(w[k]);
      const b = biasNames(L);
      for (const name of [b.gate_up, b.down]) {
        const i = m.ck.info(name);
        stored({ name, dtype: i.dtype, shape: i.shape, bytes: m.ck.read(name) });
      }
      for (let e = 0; e < c.experts; e++) {
        const ex = w.expert(e);
        lin(ex.gate_up, expertName(L, e, 'gate_up_proj'));
        lin(ex.down, expertName(L, e, 'down_proj'));
      }
      out.stream(layerFile(L), items.map((x) => x.spec), (s) => {
        for (const x of items) s.write(x.spec.name, x.bytes());
      });
    }
    return { verified: files(c.layers), extra: {} };
  });
}

export type GptOssFp16CacheLoad = { ok: true; layer: (L: number) => GptOssLayerWeights; unchanged: () => void; close: () => void } | { ok: false; why: string };

/** Open the cache for `m` (stale → ok: false; corrupt → InputError); layers are read from it on request. */
export async function loadGptOssFp16Cache(dir: string, m: GptOssCheckpoint, fingerprint: string, fpOptions: FingerprintOptions = {}, listDigest?: string | null): Promise<GptOssFp16CacheLoad> {
  const c = m.cfg;
  const want = { architecture: 'gpt_oss' as const, numLayers: c.layers, fingerprint, files: files(c.layers), checkpointDir: m.ck.dir, listDigest };
  const opened = await openCache<GptOssFp16Manifest>(dir, want, fpOptions);
  if (!opened.ok) return opened;
  const store = new CacheStore(dir, opened.pinned);
  const layer = (L: number): GptOssLayerWeights => {
    // the checkpoint's binding for shapes, dtypes and roles, without reading its bytes
    const shape = m.loadLayer(L, false);
    const file = layerFile(L);
    const f16 = (lw: LinearWeight, name = lw.name): LinearWeight => ({ name, format: 'plain', out: lw.out, in: lw.in, weight: store.stored(file, name, 'F16', [lw.out, lw.in]), scale: null, block: [1, 1] });
    const st = (t: StoredTensor) => store.stored(file, t.name, t.dtype, t.shape);
    const b = biasNames(L);
    // every expert's biases in one table, of which a token reads its routed experts' rows: mapped as touched
    const guBias = store.stored(file, b.gate_up, m.ck.info(b.gate_up).dtype, [c.experts, 2 * c.intermediate], false);
    const dnBias = store.stored(file, b.down, m.ck.info(b.down).dtype, [c.experts, c.hidden], false);
    const row = (t: StoredTensor, e: number, n: number): StoredTensor => {
      const per = t.bytes.byteLength / c.experts;
      return { name: `${t.name}[${e}]`, dtype: t.dtype, shape: [n], bytes: t.bytes.subarray(e * per, (e + 1) * per), file: t.file };
    };
    const experts = new Map<number, GptOssExpert>();
    return {
      index: L,
      sliding: shape.sliding,
      input_layernorm: st(shape.input_layernorm),
      post_attention_layernorm: st(shape.post_attention_layernorm),
      q_proj: f16(shape.q_proj),
      k_proj: f16(shape.k_proj),
      v_proj: f16(shape.v_proj),
      o_proj: f16(shape.o_proj),
      q_bias: st(shape.q_bias),
      k_bias: st(shape.k_bias),
      v_bias: st(shape.v_bias),
      o_bias: st(shape.o_bias),
      sinks: st(shape.sinks),
      router: f16(shape.router),
      router_bias: st(shape.router_bias),
      expert: (e: number) => {
        if (!Number.isInteger(e) || e < 0 || e >= c.experts) throw new Error(`expert ${e} is outside [0, ${c.experts})`);
        let ex = experts.get(e);
        if (ex === undefined) {
          const gu = { out: 2 * c.intermediate, in: c.hidden };
          const dn = { out: c.hidden, in: c.intermediate };
          ex = {
            gate_up: f16(gu as LinearWeight, expertName(L, e, 'gate_up_proj')),
            gate_up_bias: row(guBias, e, 2 * c.intermediate),
            down: f16(dn as LinearWeight, expertName(L, e, 'down_proj')),
            down_bias: row(dnBias, e, c.hidden),
          };
          experts.set(e, ex);
        }
        return ex;
      },
    };
  };
  return { ok: true, layer, unchanged: () => store.unchanged(), close: () => store.close() };
}
