#!/usr/bin/env python3
"""Independent float64 golden for the gpt-oss-tiny fixture.

A numpy (2.x) implementation of the gpt-oss forward pass written only from shared/spec/gpt-oss.md
(§1 config, §2 tensors, §3 forward pass), shared/spec/fp4-formats.md §4 (the *_blocks/*_scales MXFP4
layout) and OpenAI's gpt_oss/torch/model.py, with its own safetensors parser (no safetensors package),
its own BF16 and MXFP4 decoders and its own YaRN. It shares no code with reference-cpu/ and is not run by
users or CI: its output is committed.

Regenerate (from the repository root, after a deliberate change to fixtures/gpt_oss_tiny.ts and a
regenerated fixtures/gpt-oss-tiny/):

    python3 scripts/golden/gpt_oss_numpy.py
    # options: --fixture fixtures/gpt-oss-tiny --out fixtures/gpt-oss-tiny-golden

It writes:
  golden.safetensors  F32 `embed` [S, H], `layer.L` [S, H] (the residual stream after layer L),
                      `layer.L.attn` [S, H] (the attention output added to the stream), `layer.L.moe` [S, H]
                      (the experts' weighted sum added to it), `layer.L.router_weights` [S, k] (in
                      ascending expert order), `final_norm` [S, H], `logits` [S, V];
                      I64 `tokens` [S], `layer.L.experts` [S, k] (chosen experts, ascending);
                      F32 `ablation.<name>.logits` [S, V] for the ablations below.
  golden.json         token ids, conventions, the ablations and their relative change of the logits,
                      and statistics that show each trap is reached (clamp hits, sink share of the
                      softmax mass, keys outside the window, YaRN's ramp, router top-k margins as drawn).

Conventions (fixed here; the TypeScript reference must follow them to match):
  - positions 0..S-1 (prefill of the whole sequence), logits for every position;
  - ties in the router's top-k go to the lowest expert id;
  - every weight dequantized exactly, activations in float64.

Ablations (each puts one mistake back, in every layer):
  halves           gate = gate_up rows [0, I), up = rows [I, 2I) instead of even/odd rows
  no_sink          the sink dropped from the softmax denominator
  sink_scaled      the sink multiplied by 1/sqrt(head_dim) like the scores
  no_window        sliding layers attend to every earlier key
  window_all       full layers get the sliding window too
  no_concentration YaRN inv_freq kept, cos/sin not multiplied by 0.1 ln(factor) + 1
  softmax_all      expert weights from a softmax over all E router logits (taken at the top-k)
  no_router_bias   router logits without the bias
  no_attn_bias     q/k/v/o without biases
  no_expert_bias   gate_up/down without biases
  no_gate_clamp    gate not clamped above
  no_up_clamp      up not clamped to +-limit
  no_plus_one      (up + 1) replaced by up
  alpha_one        sigmoid(gate) instead of sigmoid(1.702 gate)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import rel_l2, write_safetensors  # noqa: E402  (the shared output code)

# --------------------------------------------------------------------------------------------- files


class Shard:
    """safetensors: u64 LE header length N, N bytes of JSON, then raw little-endian tensor data."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n].decode("utf-8"))
        header.pop("__metadata__", None)
        self.entries = header
        self.data = memoryview(data)[8 + n:]

    def raw(self, name: str):
        e = self.entries[name]
        b, end = e["data_offsets"]
        return e["dtype"], e["shape"], bytes(self.data[b:end])


class Checkpoint:
    def __init__(self, d: str):
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        shards = {f: Shard(os.path.join(d, f)) for f in sorted(set(wm.values()))}
        self.where = {name: shards[f] for name, f in wm.items()}

    def raw(self, name: str):
        return self.where[name].raw(name)

    def tensor(self, name: str) -> np.ndarray:
        """A BF16 / F32 tensor as float64."""
        dt, shape, b = self.raw(name)
        if dt == "F32":
            x = np.frombuffer(b, dtype="<f4").astype(np.float64)
        elif dt == "BF16":
            # BF16 is the high half of an IEEE float32
            x = (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise SystemExit(f"{name}: unexpected dtype {dt}")
        return x.reshape(shape)

    def experts(self, stem: str) -> np.ndarray:
        """MXFP4 experts (fp4-formats.md §4): W[e, r, 32b + j] = E2M1[nibble j of blocks[e, r, b]] * 2^(scales[e, r, b] - 127),
        nibble 2i = low half of byte i, 2i+1 = high half."""
        dtb, shb, bb = self.raw(stem + "_blocks")
        dts, shs, bs = self.raw(stem + "_scales")
        assert dtb == "U8" and dts == "U8", (dtb, dts)
        E, R, nb, sixteen = shb
        assert sixteen == 16 and shs == [E, R, nb]
        blocks = np.frombuffer(bb, dtype=np.uint8).reshape(E, R, nb, 16)
        scales = np.frombuffer(bs, dtype=np.uint8).reshape(E, R, nb).astype(np.int64)
        lo = blocks & 0x0F
        hi = blocks >> 4
        codes = np.stack([lo, hi], axis=-1).reshape(E, R, nb, 32)
        vals = E2M1[codes]
        return (vals * np.exp2(scales - 127.0)[..., None]).reshape(E, R, nb * 32)


# E2M1: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; subnormal at exponent 0.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])

# --------------------------------------------------------------------------------------------- model


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(z):
    z = z - np.max(z, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


class Model:
    def __init__(self, ck: Checkpoint, c: dict, ablate: set[str]):
        self.ck, self.c, self.ab = ck, c, ablate
        self.H = c["hidden_size"]
        self.NH = c["num_attention_heads"]
        self.NKV = c["num_key_value_heads"]
        self.d = c["head_dim"]
        self.E = c["num_local_experts"]
        self.k = c["num_experts_per_tok"]
        self.I = c["intermediate_size"]
        self.eps = c["rms_norm_eps"]
        self.limit = c["swiglu_limit"]
        self.window = c["sliding_window"]
        self.layer_types = c["layer_types"]
        self.stats: dict = {}

    def yarn(self, S):
        """cos, sin [S, d/2] per OpenAI's _compute_concentration_and_inv_freq and _compute_cos_sin."""
        d, base = self.d, self.c["rope_theta"]
        rs = self.c["rope_scaling"]
        factor, bfast, bslow, C = rs["factor"], rs["beta_fast"], rs["beta_slow"], rs["original_max_position_embeddings"]
        freq = base ** (np.arange(0, d, 2, dtype=np.float64) / d)
        conc = 0.1 * math.log(factor) + 1.0
        dh = d / 2
        low = dh * math.log(C / (bfast * 2 * math.pi)) / math.log(base)
        high = dh * math.log(C / (bslow * 2 * math.pi)) / math.log(base)
        assert 0 < low < high < dh - 1
        ramp = np.clip((np.arange(dh) - low) / (high - low), 0, 1)
        mask = 1 - ramp
        inv = (1.0 / (factor * freq)) * (1 - mask) + (1.0 / freq) * mask
        self.stats["yarn"] = {"low": low, "high": high, "concentration": conc,
                              "interpolated": int(np.sum(ramp == 1)), "extrapolated": int(np.sum(ramp == 0)),
                              "ramped": int(np.sum((ramp > 0) & (ramp < 1)))}
        if "no_concentration" in self.ab:
            conc = 1.0
        ang = np.arange(S, dtype=np.float64)[:, None] * inv[None, :]
        return np.cos(ang) * conc, np.sin(ang) * conc

    @staticmethod
    def rope(x, cos, sin):
        # x [S, heads, d], half-split: out = [x1 cos - x2 sin, x2 cos + x1 sin]
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def attention(self, L, x, cos, sin):
        ck, p, ab = self.ck, f"model.layers.{L}.self_attn", self.ab
        S = x.shape[0]
        nb = "no_attn_bias" in ab
        lin = lambda n, a: a @ ck.tensor(f"{p}.{n}.weight").T + (0 if nb else ck.tensor(f"{p}.{n}.bias"))
        a = rmsnorm(x, ck.tensor(f"model.layers.{L}.input_layernorm.weight"), self.eps)
        q = self.rope(lin("q_proj", a).reshape(S, self.NH, self.d), cos, sin)
        k = self.rope(lin("k_proj", a).reshape(S, self.NKV, self.d), cos, sin)
        v = lin("v_proj", a).reshape(S, self.NKV, self.d)
        sliding = self.layer_types[L] == "sliding_attention"
        if "no_window" in ab:
            sliding = False
        if "window_all" in ab:
            sliding = True
        sinks = ck.tensor(f"{p}.sinks")
        sm = 1.0 / math.sqrt(self.d)
        group = self.NH // self.NKV
        o = np.zeros((S, self.NH, self.d))
        sink_share = []
        outside = 0
        for h in range(self.NH):
            kv = h // group
            z = (q[:, h, :] @ k[:, kv, :].T) * sm  # [S, S]
            t = np.arange(S)[:, None]
            s = np.arange(S)[None, :]
            visible = s <= t
            if sliding:
                outside += int(np.sum(visible & (s <= t - self.window)))
                visible &= s > t - self.window
            z = np.where(visible, z, -np.inf)
            if "no_sink" in ab:
                P = softmax(z)
            else:
                sink = sinks[h] * (sm if "sink_scaled" in ab else 1.0)
                zz = np.concatenate([z, np.full((S, 1), sink)], axis=1)
                Pfull = softmax(zz)
                sink_share.append(float(np.mean(Pfull[:, -1])))
                P = Pfull[:, :-1]
            o[:, h, :] = P @ v[:, kv, :]
        out = o.reshape(S, self.NH * self.d) @ ck.tensor(f"{p}.o_proj.weight").T
        if not nb:
            out = out + ck.tensor(f"{p}.o_proj.bias")
        st = self.stats.setdefault(f"layer.{L}", {})
        st["sliding"] = sliding
        st["keys_outside_window"] = outside
        if sink_share:
            st["sink_share_mean"] = float(np.mean(sink_share))
        return out

    def moe(self, L, x):
        ck, p, ab = self.ck, f"model.layers.{L}.mlp", self.ab
        S = x.shape[0]
        m = rmsnorm(x, ck.tensor(f"model.layers.{L}.post_attention_layernorm.weight"), self.eps)
        g = m @ ck.tensor(f"{p}.router.weight").T
        if "no_router_bias" not in ab:
            g = g + ck.tensor(f"{p}.router.bias")
        W1 = ck.experts(f"{p}.experts.gate_up_proj")  # [E, 2I, H]
        b1 = ck.tensor(f"{p}.experts.gate_up_proj_bias")
        W2 = ck.experts(f"{p}.experts.down_proj")  # [E, H, I]
        b2 = ck.tensor(f"{p}.experts.down_proj_bias")
        if "no_expert_bias" in ab:
            b1, b2 = 0 * b1, 0 * b2
        out = np.zeros((S, self.H))
        chosen = np.zeros((S, self.k), dtype=np.int64)
        weights = np.zeros((S, self.k))
        margins, hits = [], {"gate_above": 0, "up_above": 0, "up_below": 0, "elements": 0}
        alpha = 1.0 if "alpha_one" in ab else 1.702
        for t in range(S):
            order = sorted(range(self.E), key=lambda e: (-g[t, e], e))  # descending, ties to lower id
            ids = sorted(order[: self.k])
            margins.append(float(g[t, order[self.k - 1]] - g[t, order[self.k]]))
            if "softmax_all" in ab:
                w = softmax(g[t])[ids]
            else:
                w = softmax(g[t, ids])
            chosen[t], weights[t] = ids, w
            for e, we in zip(ids, w):
                h = W1[e] @ m[t] + b1[e]
                if "halves" in ab:
                    gate, up = h[: self.I], h[self.I:]
                else:
                    gate, up = h[0::2], h[1::2]
                hits["gate_above"] += int(np.sum(gate > self.limit))
                hits["up_above"] += int(np.sum(up > self.limit))
                hits["up_below"] += int(np.sum(up < -self.limit))
                hits["elements"] += gate.size
                if "no_gate_clamp" not in ab:
                    gate = np.minimum(gate, self.limit)
                if "no_up_clamp" not in ab:
                    up = np.clip(up, -self.limit, self.limit)
                act = gate * sigmoid(alpha * gate) * (up if "no_plus_one" in ab else up + 1)
                out[t] += we * (W2[e] @ act + b2[e])
        st = self.stats.setdefault(f"layer.{L}", {})
        st["router_min_margin"] = min(margins)
        st["router_median_margin"] = float(np.median(margins))
        st["clamp"] = hits
        return out, chosen, weights

    def forward(self, tokens):
        ck = self.ck
        S = len(tokens)
        res = {}
        x = ck.tensor("model.embed_tokens.weight")[tokens]
        res["embed"] = x
        cos, sin = self.yarn(S)
        for L in range(self.c["num_hidden_layers"]):
            a = self.attention(L, x, cos, sin)
            x = x + a
            mo, chosen, w = self.moe(L, x)
            x = x + mo
            res[f"layer.{L}"] = x
            res[f"layer.{L}.attn"] = a
            res[f"layer.{L}.moe"] = mo
            res[f"layer.{L}.experts"] = chosen
            res[f"layer.{L}.router_weights"] = w
        f = rmsnorm(x, ck.tensor("model.norm.weight"), self.eps)
        res["final_norm"] = f
        res["logits"] = f @ ck.tensor("lm_head.weight").T
        return res


ABLATIONS = ["halves", "no_sink", "sink_scaled", "no_window", "window_all", "no_concentration", "softmax_all",
             "no_router_bias", "no_attn_bias", "no_expert_bias", "no_gate_clamp", "no_up_clamp", "no_plus_one",
             "alpha_one"]


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", default=os.path.join(root, "fixtures", "gpt-oss-tiny"))
    ap.add_argument("--out", default=os.path.join(root, "fixtures", "gpt-oss-tiny-golden"))
    ap.add_argument("--tokens", type=int, default=24, help="sequence length (BOS + seeded ids); must exceed sliding_window")
    a = ap.parse_args()
    with open(os.path.join(a.fixture, "config.json")) as f:
        c = json.load(f)
    if a.tokens <= c["sliding_window"]:
        raise SystemExit(f"--tokens {a.tokens} must exceed sliding_window {c['sliding_window']}")
    ck = Checkpoint(a.fixture)
    rng = np.random.default_rng(13)
    tokens = [c["bos_token_id"]] + [int(t) for t in rng.integers(2, c["vocab_size"], a.tokens - 1)]

    base = Model(ck, c, set())
    res = base.forward(tokens)
    tensors = [("tokens", np.array(tokens, dtype=np.int64))]
    for name, x in res.items():
        tensors.append((name, x if x.dtype == np.int64 else x.astype(np.float64)))
    ablations = {}
    for ab in ABLATIONS:
        r = Model(ck, c, {ab}).forward(tokens)
        tensors.append((f"ablation.{ab}.logits", r["logits"]))
        ablations[ab] = {"logits_rel_l2_change": rel_l2(r["logits"], res["logits"])}
        print(f"ablation {ab:18s} logits rel_l2 change {ablations[ab]['logits_rel_l2_change']:.3e}")
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "golden.safetensors"), tensors, {"generator": "scripts/golden/gpt_oss_numpy.py"})
    sha = {}
    for f in sorted(os.listdir(a.fixture)):
        if f.endswith(".safetensors"):
            with open(os.path.join(a.fixture, f), "rb") as fh:
                sha[f] = hashlib.sha256(fh.read()).hexdigest()
    meta = {
        "generator": "scripts/golden/gpt_oss_numpy.py (float64 numpy, written from spec/gpt-oss.md and OpenAI's gpt_oss/torch/model.py)",
        "fixture": os.path.relpath(a.fixture, root),
        "fixture_sha256": sha,
        "tokens": tokens,
        "conventions": ["positions 0..S-1, logits at every position", "router top-k ties to the lower expert id",
                        "weights dequantized exactly, activations float64"],
        "ablations": ablations,
        "stats": base.stats,
    }
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(json.dumps(base.stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
