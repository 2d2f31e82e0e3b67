#!/usr/bin/env python3
"""Independent float64 golden for the deepseek-v4-tiny fixture.

A numpy (2.x) implementation of the DeepSeek-V4-Flash forward pass written only from
shared/spec/deepseek-v4-flash.md (§3 formats, §4 forward pass, §10 corrections), with its own
safetensors parser (no safetensors package) and its own FP8 / MXFP4 dequantizers. It shares no code
with reference-cpu/ and is not run by users or CI: its output is committed.

Regenerate (from the repository root, after a deliberate change to fixtures/deepseek_v4_tiny.ts and a
regenerated fixtures/deepseek-v4-tiny/):

    python3 scripts/golden/deepseek_v4_numpy.py
    # options: --fixture fixtures/deepseek-v4-tiny --out fixtures/deepseek-v4-tiny-golden

It writes:
  golden.safetensors  F32 `embed` [S, dim] (one copy of the embedding row; the block input is hc_mult
                      copies of it), `layer.L` [S, hc_mult, dim] (the hyper-connection streams after
                      layer L's ffn hc_post), `final_norm` [S, dim], `logits` [S, vocab];
                      I64 `tokens` [S], `layer.L.experts` [S, top_k] (chosen routed experts, sorted
                      ascending), `layer.L.indexer` [S, index_topk] for CSA layers (selected compressed
                      block ids, sorted ascending, -1 padded when fewer are visible);
                      F32 `ablation.<name>.logits` [S, vocab] for the ablations below.
  golden.json         token ids, the config used, conventions, ablation descriptions and their
                      relative change of the logits, and fixture statistics (clamp hits, top-k gaps,
                      selection margins).

Selection margins (reported, not enforced: the fixture's routing is left as drawn, with the near-ties a
real checkpoint has, issue #10):
  router   non-hash layers, every token t: (b_(k) - b_(k+1)) / max_e s_{t,e}, b = s + gate.bias the biased
           scores sorted descending, k = num_experts_per_tok  -> stats layer.L.router_min_margin
  indexer  CSA layers, every query with more than index_topk visible blocks:
           (score_(k) - score_(k+1)) / max_b |score(t, b)|, k = index_topk  -> stats layer.L.indexer_min_margin

Conventions (fixed here; the TypeScript reference must follow them to match):
  - positions 0..S-1 (prefill of the whole sequence), logits for every position;
  - ties in any top-k go to the lowest index (DESIGN §5, spec §10.1);
  - no Hadamard transform and no QAT / activation-quantization simulation (spec §4.9 recommended
    reference); every weight dequantized exactly, activations in float64;
  - rope settings from config.json (cross-checked against inference/config.json, spec §10.2).

Ablations (each changes exactly one mechanism, in every layer):
  window_inf      sliding window disabled: every earlier token is a raw candidate
  no_compression  no compressed candidates (CSA and HCA layers attend to the window only)
  indexer_all     the CSA indexer replaced by "select every visible compressed block"
  no_sink         attn_sink removed from the softmax denominator
  score_routing   hash layers route by top-k of the gate scores (no bias: hash layers have none)
  no_clamp        swiglu_limit clamp removed from the routed experts
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

# ---------------------------------------------------------------------------------------------
# safetensors (spec §2.1): u64 LE header length N, N bytes of JSON, raw little-endian data.

_DT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
             "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


class Shard:
    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n].decode("utf-8"))
        self.meta = header.pop("__metadata__", {})
        self.entries = header
        self.data = memoryview(data)[8 + n:]
        for name, e in header.items():
            b, end = e["data_offsets"]
            want = int(np.prod(e["shape"], dtype=np.int64)) * _DT_BYTES[e["dtype"]]
            if end - b != want or end > len(self.data):
                raise ValueError(f"{path}: {name} has bad data_offsets")

    def raw(self, name: str):
        e = self.entries[name]
        b, end = e["data_offsets"]
        return e["dtype"], list(e["shape"]), np.frombuffer(self.data[b:end], dtype=np.uint8)


class Checkpoint:
    def __init__(self, d: str):
        self.dir = d
        with open(os.path.join(d, "config.json")) as f:
            self.config = json.load(f)
        inf = os.path.join(d, "inference", "config.json")
        self.inference = json.load(open(inf)) if os.path.exists(inf) else None
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        self.shards = {s: Shard(os.path.join(d, s)) for s in sorted(set(wm.values()))}
        self.where = wm

    def has(self, name: str) -> bool:
        return name in self.where

    def raw(self, name: str):
        return self.shards[self.where[name]].raw(name)

    def tensor(self, name: str) -> np.ndarray:
        """Any non-quantized tensor as float64 (I64 as int64)."""
        dt, shape, b = self.raw(name)
        if dt == "F32":
            x = b.view("<f4").astype(np.float64)
        elif dt == "BF16":
            x = (b.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "I64":
            return b.view("<i8").reshape(shape).copy()
        else:
            raise ValueError(f"{name}: unexpected dtype {dt}")
        return x.reshape(shape)

    def linear(self, stem: str) -> np.ndarray:
        """Dequantized [out, in] float64 weight of `<stem>.weight` (+ `<stem>.scale`)."""
        dt, shape, b = self.raw(stem + ".weight")
        if dt in ("BF16", "F32"):
            return self.tensor(stem + ".weight")
        if dt == "U8" and self.has(stem + ".weight_scale_2"):
            return self.nvfp4(stem)
        sdt, sshape, sb = self.raw(stem + ".scale")
        assert sdt == "F8_E8M0", f"{stem}.scale is {sdt}"
        scale = e8m0(sb).reshape(sshape)
        out, cols = shape
        if dt == "F8_E4M3":
            assert sshape == [-(-out // 128), -(-cols // 128)], f"{stem}: FP8 scale shape {sshape}"
            w = E4M3[b].reshape(out, cols)
            s = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:out, :cols]
            return w * s
        if dt == "I8":
            inn = 2 * cols
            assert sshape == [out, inn // 32], f"{stem}: FP4 scale shape {sshape}"
            u = b.reshape(out, cols)
            codes = np.empty((out, inn), dtype=np.uint8)
            codes[:, 0::2] = u & 0x0F  # element 2j: low nibble
            codes[:, 1::2] = u >> 4    # element 2j+1: high nibble
            return E2M1[codes] * np.repeat(scale, 32, axis=1)
        raise ValueError(f"{stem}.weight: unexpected dtype {dt}")

    def nvfp4(self, stem: str) -> np.ndarray:
        """NVIDIA ModelOpt NVFP4 (spec/fp4-formats.md §2): U8 `.weight` [out, in/2] low-even, F8_E4M3
        `.weight_scale` [out, in/16], F32 `.weight_scale_2` [] a multiplier; the block scale is
        float32(e4m3(s) * s2) (ModelOpt's float32 product), the element E2M1 times it."""
        _, shape, b = self.raw(stem + ".weight")
        sdt, sshape, sb = self.raw(stem + ".weight_scale")
        gdt, gshape, gb = self.raw(stem + ".weight_scale_2")
        assert sdt == "F8_E4M3" and gdt == "F32" and gshape in ([], [1]), f"{stem}: NVFP4 scales {sdt} {gdt} {gshape}"
        out, cols = shape
        inn = 2 * cols
        assert sshape == [out, inn // 16], f"{stem}: NVFP4 scale shape {sshape}"
        s2 = np.float32(gb.view("<f4")[0])
        scale = (E4M3[sb].astype(np.float32) * s2).astype(np.float64).reshape(out, inn // 16)
        u = b.reshape(out, cols)
        codes = np.empty((out, inn), dtype=np.uint8)
        codes[:, 0::2] = u & 0x0F
        codes[:, 1::2] = u >> 4
        return E2M1[codes] * np.repeat(scale, 16, axis=1)


# ---------------------------------------------------------------------------------------------
# number formats (spec §3)

def _e4m3(byte: int) -> float:
    s = -1.0 if byte & 0x80 else 1.0
    e = (byte >> 3) & 0xF
    m = byte & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return s * 2.0 ** -6 * (m / 8)
    return s * 2.0 ** (e - 7) * (1 + m / 8)


E4M3 = np.array([_e4m3(b) for b in range(256)], dtype=np.float64)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def e8m0(b: np.ndarray) -> np.ndarray:
    v = np.ldexp(1.0, b.astype(np.int64) - 127)
    return np.where(b == 0xFF, np.nan, v)


# ---------------------------------------------------------------------------------------------
# model pieces (spec §4)

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def softplus(x):
    # PyTorch's softplus: linear above x > 20
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def silu(x):
    return x * sigmoid(x)


def topk_lowest_index(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores; among equal scores the lowest index first."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return order[:k]


class Cfg:
    def __init__(self, c: dict, inf: dict | None):
        self.vocab = c["vocab_size"]
        self.dim = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.head_dim = c["head_dim"]
        self.rope_dim = c["qk_rope_head_dim"]
        self.q_lora = c["q_lora_rank"]
        self.o_groups = c["o_groups"]
        self.o_lora = c["o_lora_rank"]
        self.window = c["sliding_window"]
        self.ratios = c["compress_ratios"]
        self.index_heads = c["index_n_heads"]
        self.index_dim = c["index_head_dim"]
        self.index_topk = c["index_topk"]
        self.n_experts = c["n_routed_experts"]
        self.top_k = c["num_experts_per_tok"]
        self.route_scale = c["routed_scaling_factor"]
        self.n_hash = c["num_hash_layers"]
        self.swiglu_limit = c["swiglu_limit"]
        self.hc = c["hc_mult"]
        self.sinkhorn_iters = c["hc_sinkhorn_iters"]
        self.hc_eps = c.get("hc_eps", 1e-6)
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.rope_theta = c["rope_theta"]
        self.compress_rope_theta = c["compress_rope_theta"]
        rs = c.get("rope_scaling") or {}
        self.rope_factor = rs.get("factor", 1)
        self.original_seq_len = rs.get("original_max_position_embeddings", 0)
        self.beta_fast = rs.get("beta_fast", 32)
        self.beta_slow = rs.get("beta_slow", 1)
        assert c.get("scoring_func", "sqrtsoftplus") == "sqrtsoftplus"
        assert c.get("norm_topk_prob", True) is True
        if inf is not None:  # spec §10.2: both files must agree
            pairs = [("dim", self.dim), ("n_layers", self.n_layers), ("n_heads", self.n_heads),
                     ("head_dim", self.head_dim), ("rope_head_dim", self.rope_dim),
                     ("q_lora_rank", self.q_lora), ("o_groups", self.o_groups),
                     ("o_lora_rank", self.o_lora), ("window_size", self.window),
                     ("compress_ratios", self.ratios), ("index_n_heads", self.index_heads),
                     ("index_head_dim", self.index_dim), ("index_topk", self.index_topk),
                     ("n_routed_experts", self.n_experts), ("n_activated_experts", self.top_k),
                     ("route_scale", self.route_scale), ("n_hash_layers", self.n_hash),
                     ("swiglu_limit", self.swiglu_limit), ("hc_mult", self.hc),
                     ("hc_sinkhorn_iters", self.sinkhorn_iters), ("rope_theta", self.rope_theta),
                     ("compress_rope_theta", self.compress_rope_theta),
                     ("rope_factor", self.rope_factor), ("original_seq_len", self.original_seq_len),
                     ("beta_fast", self.beta_fast), ("beta_slow", self.beta_slow),
                     ("vocab_size", self.vocab)]
            for k, v in pairs:
                if k in inf and inf[k] != v:
                    raise ValueError(f"inference/config.json {k}={inf[k]!r} disagrees with config.json ({v!r})")

    def as_dict(self):
        return {k: v for k, v in vars(self).items()}


def rope_freqs(cfg: Cfg, compressed: bool) -> np.ndarray:
    """Per-pair frequencies f_i, i = 0..R/2-1 (spec §4.1 with §10.3's general constants)."""
    R = cfg.rope_dim
    base = cfg.compress_rope_theta if compressed else cfg.rope_theta
    i = np.arange(R // 2, dtype=np.float64)
    f = base ** (-2 * i / R)
    if compressed and cfg.original_seq_len > 0:
        def c(beta):
            return R * math.log(cfg.original_seq_len / (2 * math.pi * beta)) / (2 * math.log(base))
        lo = max(math.floor(c(cfg.beta_fast)), 0)
        hi = min(math.ceil(c(cfg.beta_slow)), R - 1)
        assert hi > lo
        ramp = np.clip((i - lo) / (hi - lo), 0, 1)
        s = 1 - ramp
        f = f * (s + (1 - s) / cfg.rope_factor)
    return f


def rope(v: np.ndarray, pos, freqs: np.ndarray, inverse=False) -> np.ndarray:
    """Interleaved-pair rotation of the last 2·len(freqs) dims of v [..., width]; pos broadcasts
    against v's leading dims (a scalar or an array shaped like v[..., 0])."""
    R = 2 * len(freqs)
    out = v.copy()
    phi = np.asarray(pos, dtype=np.float64)[..., None] * freqs
    if inverse:
        phi = -phi
    cos, sin = np.cos(phi), np.sin(phi)
    a = v[..., -R::2]
    b = v[..., -R + 1::2]
    out[..., -R::2] = a * cos - b * sin
    out[..., -R + 1::2] = a * sin + b * cos
    return out


def hc_pre(cfg: Cfg, X, fn, base, scale):
    """X [S, hc, D] -> u [S, D], post [S, hc], C [S, hc, hc] (spec §4.3)."""
    S, hc, D = X.shape
    xf = X.reshape(S, hc * D)
    rho = 1.0 / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + cfg.eps)
    m = rho * (xf @ fn.T)
    pre = sigmoid(scale[0] * m[:, :hc] + base[:hc]) + cfg.hc_eps
    post = 2 * sigmoid(scale[1] * m[:, hc:2 * hc] + base[hc:2 * hc])
    A = (scale[2] * m[:, 2 * hc:] + base[2 * hc:]).reshape(S, hc, hc)
    A = A - A.max(axis=-1, keepdims=True)
    C = np.exp(A)
    C = C / C.sum(axis=-1, keepdims=True) + cfg.hc_eps
    C = C / (C.sum(axis=-2, keepdims=True) + cfg.hc_eps)
    for _ in range(cfg.sinkhorn_iters - 1):
        C = C / (C.sum(axis=-1, keepdims=True) + cfg.hc_eps)
        C = C / (C.sum(axis=-2, keepdims=True) + cfg.hc_eps)
    u = np.einsum("sj,sjd->sd", pre, X)
    return u, post, C


def hc_post(F, X, post, C):
    """X'_k = post_k F + sum_j C_jk X_j."""
    return post[:, :, None] * F[:, None, :] + np.einsum("sjk,sjd->skd", C, X)


def compress(a, wkv, wgate, ape, norm_w, ratio, width, freqs, eps):
    """Compressed entries [B, width] of a [S, D] (spec §4.5.3): per-channel softmax over the slots,
    overlap layout iff ratio == 4; then RMSNorm and RoPE at b·ratio."""
    S = a.shape[0]
    K = a @ wkv.T
    Z = a @ wgate.T
    B = S // ratio
    out = np.zeros((B, width))
    for b in range(B):
        cur = slice(b * ratio, (b + 1) * ratio)
        if ratio == 4:
            kc, zc = K[cur, width:], Z[cur, width:] + ape[:, width:]
            if b > 0:
                prev = slice((b - 1) * ratio, b * ratio)
                kp, zp = K[prev, :width], Z[prev, :width] + ape[:, :width]
            else:
                kp, zp = np.zeros((ratio, width)), np.full((ratio, width), -np.inf)
            kk, zz = np.concatenate([kp, kc]), np.concatenate([zp, zc])
        else:
            kk, zz = K[cur], Z[cur] + ape
        zz = zz - zz.max(axis=0, keepdims=True)
        p = np.exp(zz)
        p = p / p.sum(axis=0, keepdims=True)
        out[b] = (p * kk).sum(axis=0)
    out = rmsnorm(out, norm_w, eps)
    return rope(out, np.arange(B) * ratio, freqs)


class Ablation:
    def __init__(self, name=None):
        self.name = name
        self.window_inf = name == "window_inf"
        self.no_compression = name == "no_compression"
        self.indexer_all = name == "indexer_all"
        self.no_sink = name == "no_sink"
        self.score_routing = name == "score_routing"
        self.no_clamp = name == "no_clamp"


ABLATIONS = ["window_inf", "no_compression", "indexer_all", "no_sink", "score_routing", "no_clamp"]


def attention(cfg: Cfg, ck: Checkpoint, p: str, layer: int, a, ab: Ablation, stats: dict):
    S = a.shape[0]
    H, d, R = cfg.n_heads, cfg.head_dim, cfg.rope_dim
    ratio = cfg.ratios[layer]
    freqs = rope_freqs(cfg, ratio > 0)
    pos = np.arange(S)
    qr = rmsnorm(a @ ck.linear(p + "attn.wq_a").T, ck.tensor(p + "attn.q_norm.weight"), cfg.eps)
    q = (qr @ ck.linear(p + "attn.wq_b").T).reshape(S, H, d)
    q = q / np.sqrt(np.mean(q * q, axis=-1, keepdims=True) + cfg.eps)
    q = rope(q, pos[:, None], freqs)
    kv = rmsnorm(a @ ck.linear(p + "attn.wkv").T, ck.tensor(p + "attn.kv_norm.weight"), cfg.eps)
    kv = rope(kv, pos, freqs)
    sink = ck.tensor(p + "attn.attn_sink")

    comp = None
    selected = None  # CSA: per query, the chosen compressed block ids
    if ratio > 0:
        c = 2 if ratio == 4 else 1
        cp = p + "attn.compressor."
        comp = compress(a, ck.tensor(cp + "wkv.weight"), ck.tensor(cp + "wgate.weight"),
                        ck.tensor(cp + "ape"), ck.tensor(cp + "norm.weight"), ratio, d, freqs, cfg.eps)
        assert comp.shape[1] == d and ck.tensor(cp + "ape").shape == (ratio, c * d)
    if ratio == 4:
        ip = p + "attn.indexer."
        nI, dI = cfg.index_heads, cfg.index_dim
        eI = compress(a, ck.tensor(ip + "compressor.wkv.weight"), ck.tensor(ip + "compressor.wgate.weight"),
                      ck.tensor(ip + "compressor.ape"), ck.tensor(ip + "compressor.norm.weight"),
                      4, dI, freqs, cfg.eps)
        qI = (qr @ ck.linear(ip + "wq_b").T).reshape(S, nI, dI)
        qI = rope(qI, pos[:, None], freqs)
        w = (a @ ck.linear(ip + "weights_proj").T) * dI ** -0.5 * nI ** -0.5
        score = np.einsum("th,thb->tb", w, np.maximum(np.einsum("thi,bi->thb", qI, eI), 0))
        selected = []
        gaps = []
        margins = []
        for t in range(S):
            nvis = (t + 1) // 4
            if ab.indexer_all:
                sel = np.arange(nvis)
            else:
                k = min(cfg.index_topk, nvis)
                sel = np.sort(topk_lowest_index(score[t, :nvis], k))
                if nvis > k:
                    srt = np.sort(score[t, :nvis])[::-1]
                    gaps.append((srt[k - 1] - srt[k]) / max(abs(srt[k - 1]), 1e-300))
                    scale = np.max(np.abs(score[t, :nvis]))
                    margins.append((srt[k - 1] - srt[k]) / scale if scale > 0 else 0.0)
            selected.append(sel)
        if ab.name is None:
            stats[f"layer.{layer}.indexer_min_rel_gap"] = float(min(gaps)) if gaps else None
            stats[f"layer.{layer}.indexer_min_margin"] = float(min(margins)) if margins else None
            stats[f"layer.{layer}.indexer_strict_subset_queries"] = len(gaps)
            vis = np.arange(score.shape[1])[None, :] < ((np.arange(S) + 1) // 4)[:, None]
            stats[f"layer.{layer}.indexer_zero_scores"] = int(np.sum((score == 0) & vis))

    o = np.zeros((S, H, d))
    scale = d ** -0.5
    for t in range(S):
        lo = 0 if ab.window_inf else max(0, t - cfg.window + 1)
        keys = [kv[lo:t + 1]]
        if comp is not None and not ab.no_compression:
            nvis = (t + 1) // ratio
            if ratio == 4:
                keys.append(comp[selected[t]])
            else:
                keys.append(comp[:nvis])
        k = np.concatenate(keys)
        z = (q[t] @ k.T) * scale  # [H, n]
        zmax = z.max(axis=-1, keepdims=True)
        if not ab.no_sink:
            zmax = np.maximum(zmax, sink[:, None])
        e = np.exp(z - zmax)
        den = e.sum(axis=-1, keepdims=True)
        if not ab.no_sink:
            den = den + np.exp(sink[:, None] - zmax)
        o[t] = (e / den) @ k
    o = rope(o, pos[:, None], freqs, inverse=True)
    G = cfg.o_groups
    og = o.reshape(S, G, (H // G) * d)
    wo_a = ck.linear(p + "attn.wo_a").reshape(G, cfg.o_lora, (H // G) * d)
    y = np.einsum("sgi,goi->sgo", og, wo_a).reshape(S, G * cfg.o_lora)
    out = y @ ck.linear(p + "attn.wo_b").T
    if selected is not None:
        sel = np.full((S, cfg.index_topk), -1, dtype=np.int64)
        for t in range(S):
            ids = selected[t][: cfg.index_topk]
            sel[t, : len(ids)] = ids
        return out, sel
    return out, None


def moe(cfg: Cfg, ck: Checkpoint, p: str, layer: int, f, tokens, ab: Ablation, stats: dict):
    S = f.shape[0]
    logits = f @ ck.tensor(p + "ffn.gate.weight").T
    s = np.sqrt(softplus(logits))
    if layer < cfg.n_hash and not ab.score_routing:
        idx = ck.tensor(p + "ffn.gate.tid2eid")[tokens]
    else:
        biased = s + ck.tensor(p + "ffn.gate.bias") if ck.has(p + "ffn.gate.bias") else s
        idx = np.stack([topk_lowest_index(biased[t], cfg.top_k) for t in range(S)])
        if ab.name is None:
            gaps = []
            for t in range(S):
                srt = np.sort(biased[t])[::-1]
                gaps.append(srt[cfg.top_k - 1] - srt[cfg.top_k])
            stats[f"layer.{layer}.router_min_gap"] = float(min(gaps))
            stats[f"layer.{layer}.router_min_margin"] = float(min(g / np.max(s[t]) for t, g in enumerate(gaps)))
    sel = np.take_along_axis(s, idx, axis=1)
    omega = cfg.route_scale * sel / sel.sum(axis=1, keepdims=True)
    out = np.zeros_like(f)
    lim = cfg.swiglu_limit
    clipped = 0
    total = 0
    cache = {}
    for t in range(S):
        for i, e in enumerate(idx[t]):
            e = int(e)
            if e not in cache:
                ep = f"{p}ffn.experts.{e}."
                cache[e] = (ck.linear(ep + "w1"), ck.linear(ep + "w2"), ck.linear(ep + "w3"))
            w1, w2, w3 = cache[e]
            g = w1 @ f[t]
            v = w3 @ f[t]
            if not ab.no_clamp:
                clipped += int(np.sum(g > lim) + np.sum(np.abs(v) > lim))
                total += 2 * len(g)
                g = np.minimum(g, lim)
                v = np.clip(v, -lim, lim)
            out[t] += w2 @ (omega[t, i] * silu(g) * v)
    sp = p + "ffn.shared_experts."
    w1, w2, w3 = ck.linear(sp + "w1"), ck.linear(sp + "w2"), ck.linear(sp + "w3")
    out += (silu(f @ w1.T) * (f @ w3.T)) @ w2.T
    if ab.name is None:
        stats[f"layer.{layer}.swiglu_clipped"] = clipped
        stats[f"layer.{layer}.swiglu_values"] = total
    return out, np.sort(idx, axis=1).astype(np.int64)


def forward(cfg: Cfg, ck: Checkpoint, tokens: np.ndarray, ab: Ablation, stats: dict):
    S = len(tokens)
    out = {}
    h = ck.tensor("embed.weight")[tokens]
    out["embed"] = h
    X = np.repeat(h[:, None, :], cfg.hc, axis=1)
    for L in range(cfg.n_layers):
        p = f"layers.{L}."
        u, post, C = hc_pre(cfg, X, ck.tensor(p + "hc_attn_fn"), ck.tensor(p + "hc_attn_base"), ck.tensor(p + "hc_attn_scale"))
        att, sel = attention(cfg, ck, p, L, rmsnorm(u, ck.tensor(p + "attn_norm.weight"), cfg.eps), ab, stats)
        X = hc_post(att, X, post, C)
        u, post, C = hc_pre(cfg, X, ck.tensor(p + "hc_ffn_fn"), ck.tensor(p + "hc_ffn_base"), ck.tensor(p + "hc_ffn_scale"))
        m, experts = moe(cfg, ck, p, L, rmsnorm(u, ck.tensor(p + "ffn_norm.weight"), cfg.eps), tokens, ab, stats)
        X = hc_post(m, X, post, C)
        out[f"layer.{L}"] = X
        out[f"layer.{L}.experts"] = experts
        if sel is not None:
            out[f"layer.{L}.indexer"] = sel
    # head (spec §4.7)
    fn, base, scale = ck.tensor("hc_head_fn"), ck.tensor("hc_head_base"), ck.tensor("hc_head_scale")
    xf = X.reshape(S, -1)
    rho = 1.0 / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + cfg.eps)
    m = rho * (xf @ fn.T)
    pre = sigmoid(m * scale[0] + base) + cfg.hc_eps
    v = np.einsum("sj,sjd->sd", pre, X)
    fnorm = rmsnorm(v, ck.tensor("norm.weight"), cfg.eps)
    out["final_norm"] = fnorm
    out["logits"] = fnorm @ ck.tensor("head.weight").T
    return out


# ---------------------------------------------------------------------------------------------
# output

def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", default=os.path.join(root, "fixtures", "deepseek-v4-tiny"))
    ap.add_argument("--out", default=os.path.join(root, "fixtures", "deepseek-v4-tiny-golden"))
    ap.add_argument("--tokens", type=int, default=96, help="sequence length S")
    ap.add_argument("--token-seed", type=int, default=20240607)
    args = ap.parse_args()

    ck = Checkpoint(args.fixture)
    cfg = Cfg(ck.config, ck.inference)
    S = args.tokens
    # Token ids: BOS (config bos_token_id) then seeded uniform ids from the vocabulary (not the specials).
    rng = np.random.default_rng(args.token_seed)
    bos = ck.config.get("bos_token_id", 0)
    tokens = np.concatenate([[bos], rng.integers(2, cfg.vocab, S - 1)]).astype(np.int64)

    stats: dict = {}
    base = forward(cfg, ck, tokens, Ablation(), stats)
    ablated = {}
    changes = {}
    for name in ABLATIONS:
        o = forward(cfg, ck, tokens, Ablation(name), {})
        ablated[name] = o["logits"]
        changes[name] = {
            "rel_l2": rel_l2(o["logits"], base["logits"]),
            "max_abs": float(np.max(np.abs(o["logits"] - base["logits"]))),
            "rows_changed": int(np.sum(np.max(np.abs(o["logits"] - base["logits"]), axis=1) > 1e-9)),
            "top1_changed": int(np.sum(o["logits"].argmax(1) != base["logits"].argmax(1))),
        }

    # Self-check: causality. A prefix run must reproduce the full run's first P positions (compressed
    # blocks, the window and the indexer may only look back), P chosen off every block boundary.
    P = S - 35
    pre = forward(cfg, ck, tokens[:P], Ablation(), {})
    causal = max(float(np.max(np.abs(pre[k] - base[k][:P]))) for k in pre if not k.endswith((".experts", ".indexer")))
    causal_sel = all(np.array_equal(pre[k][:, :], base[k][:P]) for k in pre if k.endswith((".experts", ".indexer")))
    stats["causal_prefix_check"] = {"prefix": P, "max_abs_diff": causal, "selections_equal": causal_sel}
    if not (causal < 1e-9 and causal_sel):
        print(f"causality check failed: prefix of {P} differs by {causal} (selections equal: {causal_sel})", file=sys.stderr)
        sys.exit(1)

    bad = [n for n, c in changes.items() if not c["rel_l2"] > 1e-3]
    # Each mechanism must change exactly the positions its rule reaches (rows are 0-based positions t):
    # the window excludes keys from t = window on; the first compressed entry (smallest ratio r) is
    # visible from t = r - 1; the indexer drops blocks once more than index_topk are visible, i.e. from
    # t = 4 * (index_topk + 1) - 1.
    rmin = min(r for r in cfg.ratios[: cfg.n_layers] if r > 0)
    expect_rows = {
        "window_inf": S - cfg.window,
        "no_compression": S - (rmin - 1),
        "indexer_all": (S - (4 * (cfg.index_topk + 1) - 1)) if 4 in cfg.ratios[: cfg.n_layers] else 0,
    }
    for n, rows in expect_rows.items():
        if changes[n]["rows_changed"] != rows:
            bad.append(f"{n} (changed {changes[n]['rows_changed']} rows, rule says {rows})")
    stats["expected_rows_changed"] = expect_rows
    if bad:
        print(f"ablation self-check failed (each must change the logits by > 1e-3 relative, on the rows its rule reaches): {bad}", file=sys.stderr)
        sys.exit(1)

    tensors = [("tokens", tokens), ("embed", base["embed"])]
    for L in range(cfg.n_layers):
        tensors.append((f"layer.{L}", base[f"layer.{L}"]))
        tensors.append((f"layer.{L}.experts", base[f"layer.{L}.experts"]))
        if f"layer.{L}.indexer" in base:
            tensors.append((f"layer.{L}.indexer", base[f"layer.{L}.indexer"]))
    tensors += [("final_norm", base["final_norm"]), ("logits", base["logits"])]
    tensors += [(f"ablation.{n}.logits", ablated[n]) for n in ABLATIONS]

    os.makedirs(args.out, exist_ok=True)
    shard_sha = {}
    for s in sorted(ck.shards):
        with open(os.path.join(args.fixture, s), "rb") as f:
            shard_sha[s] = hashlib.sha256(f.read()).hexdigest()
    write_safetensors(os.path.join(args.out, "golden.safetensors"), tensors,
                      {"format": "pt", "generator": "scripts/golden/deepseek_v4_numpy.py", "precision": "float64 rounded to float32"})
    doc = {
        "generator": "scripts/golden/deepseek_v4_numpy.py (float64 numpy, written from spec/deepseek-v4-flash.md)",
        "fixture": os.path.relpath(args.fixture, root),
        "fixture_sha256": shard_sha,
        "tokens": tokens.tolist(),
        "token_rule": f"bos_token_id then numpy default_rng({args.token_seed}).integers(2, vocab_size, S-1)",
        "positions": "0..S-1",
        "config": cfg.as_dict(),
        "conventions": {
            "embed": "one copy of the embedding row [S, dim]; the first block's input is hc_mult copies of it",
            "layer": "hyper-connection streams after the block's ffn hc_post [S, hc_mult, dim]",
            "topk_ties": "lowest index first (experts and indexer)",
            "experts": "layer.L.experts: chosen routed expert ids per token, sorted ascending",
            "indexer": "layer.L.indexer (CSA layers): selected compressed block ids per query, sorted ascending, -1 padded",
            "hadamard": False,
            "qat_simulation": False,
            "precision": "float64 throughout, stored as float32",
            "rope": "config.json (cross-checked against inference/config.json)",
        },
        "ablations": {
            "window_inf": {"what": "sliding window disabled: every earlier token is a raw candidate", **changes["window_inf"]},
            "no_compression": {"what": "no compressed candidates in CSA and HCA layers", **changes["no_compression"]},
            "indexer_all": {"what": "CSA indexer selects every visible compressed block", **changes["indexer_all"]},
            "no_sink": {"what": "attn_sink removed from the softmax denominator", **changes["no_sink"]},
            "score_routing": {"what": "hash layers route by top-k of the gate scores", **changes["score_routing"]},
            "no_clamp": {"what": "swiglu_limit clamp removed from the routed experts", **changes["no_clamp"]},
        },
        "stats": stats,
    }
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")

    print(f"S={S} vocab={cfg.vocab} -> {args.out}")
    for k, v in stats.items():
        print(f"  {k}: {v}")
    for n, c in changes.items():
        print(f"  ablation {n}: rel_l2 {c['rel_l2']:.3e}  max_abs {c['max_abs']:.3e}  rows {c['rows_changed']}/{S}  top1 {c['top1_changed']}")
    size = os.path.getsize(os.path.join(args.out, "golden.safetensors"))
    print(f"  golden.safetensors: {size} bytes")


if __name__ == "__main__":
    main()
