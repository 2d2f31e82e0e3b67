#!/usr/bin/env python3
"""Independent float64 golden for the Llama fixtures in the FP4 producers' formats.

A numpy (2.x) implementation of Hugging Face's LlamaForCausalLM forward pass (transformers'
models/llama/modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with rope_type default or llama3,
LlamaAttention with GQA and the causal mask, LlamaMLP, tie_word_embeddings) and of the FP4 decoders of
shared/spec/fp4-formats.md (§1 AMD Quark MXFP4, §2 NVIDIA ModelOpt NVFP4, §3 compressed-tensors NVFP4 and
MXFP4, §5 bitsandbytes NF4/FP4), with its own safetensors parser (no safetensors package, no torch) and
its own BF16/F16/E4M3/E8M0/E2M1 decoders built from the bit definitions. It shares no code with
reference-cpu/ or harness/ and is not run by users or CI: its output is committed.

Each linear's format is detected from what is stored (tensor names, dtypes and shapes), then
cross-checked with config.json's quantization_config (which modules the producer's exclude/ignore/skip
lists leave plain, and which form the quantized ones must take); a disagreement stops the script.

Regenerate (from the repository root, after a deliberate change to fixtures/llama-tiny.ts or
fixtures/fp4_producers.ts and a regenerated fixture):

    node dist/harness/cli/main.js fixture llama-tiny fixtures/formats/llama-tiny-<fmt> --format <fmt>
    python3 scripts/golden/llama_numpy.py --fixture fixtures/formats/llama-tiny-<fmt> \\
        --out fixtures/formats/llama-tiny-<fmt>-golden
    # <fmt>: quark-mxfp4 modelopt-nvfp4 ct-nvfp4 ct-mxfp4 (bnb-nf4 bnb-fp4 once those fixtures exist)
    python3 scripts/golden/llama_numpy.py --self-test   # the bitsandbytes decoder on numpy-made tensors

It writes:
  golden.safetensors  F32 `embed` [S, H], `layer.L` [S, H] (the residual stream after layer L),
                      `layer.L.attn` [S, H] (o_proj's output, added to the stream), `layer.L.mlp` [S, H]
                      (down_proj's output, added to it), `final_norm` [S, H], `logits` [S, V];
                      I64 `tokens` [S].
  golden.json         generator, fixture, sha256 of every shard and of config.json, token ids and how
                      they were drawn, conventions, and per format: which tensors were decoded as which
                      format, the float32 bits of each dequantized weight (sha256), the second scales,
                      and how far the logits move under the classic decoding mistakes of that format
                      (so the test's 1e-5 bound is seen to be sensitive to them).

Conventions (fixed here; the TypeScript reference must follow them to match):
  - positions 0..S-1 (prefill of the whole sequence), every stage at every position;
  - every weight dequantized exactly as its producer's float32 arithmetic forms it (below), then held as
    float64; activations float64 throughout;
  - MXFP4 (Quark, compressed-tensors): W = E2M1[nibble] * 2^(e8m0 - 127), exact in float32;
  - NVFP4: the block scale formed in float32 first, s = f32(e4m3(b) * weight_scale_2) (ModelOpt) or
    s = f32(e4m3(b) / weight_global_scale) (compressed-tensors, a divisor), then W = f32(E2M1 * s);
  - bitsandbytes: with double quant absmax[b] = f32(f32(nested_quant_map[code] * nested_absmax[b // nbs])
    + f32(nested_offset)), then W_flat[j] = f32(quant_map[code_j] * absmax[j // bs]), codes high-even over
    the flattened row-major tensor; quant_map as stored. (bitsandbytes itself then casts W to the
    quant_state's `dtype`, bfloat16 in practice; this golden, like the FP32 reference, keeps float32.)
  - FP4 nibbles are low-even (byte = q[2k] | q[2k+1] << 4) except bitsandbytes (high-even).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import os
import re
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import rel_l2, write_safetensors  # noqa: E402  (the shared output code)

GENERATOR = "scripts/golden/llama_numpy.py"

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
        self.sha256 = hashlib.sha256(data).hexdigest()

    def raw(self, name: str):
        e = self.entries[name]
        b, end = e["data_offsets"]
        return e["dtype"], list(e["shape"]), bytes(self.data[b:end])


class Checkpoint:
    """A Hugging Face folder: config.json, model.safetensors.index.json and its shards (or one model.safetensors)."""

    def __init__(self, d: str):
        self.dir = d
        with open(os.path.join(d, "config.json"), "rb") as f:
            cb = f.read()
        self.config = json.loads(cb)
        self.config_sha256 = hashlib.sha256(cb).hexdigest()
        idx = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                wm = json.load(f)["weight_map"]
        else:
            wm = {n: "model.safetensors" for n in Shard(os.path.join(d, "model.safetensors")).entries}
        self.shards = {f: Shard(os.path.join(d, f)) for f in sorted(set(wm.values()))}
        self.where = {name: self.shards[f] for name, f in wm.items()}

    def has(self, name: str) -> bool:
        return name in self.where

    def raw(self, name: str):
        if name not in self.where:
            raise SystemExit(f"{self.dir}: tensor {name} not found")
        return self.where[name].raw(name)

    def dtype_shape(self, name: str):
        e = self.where[name].entries[name]
        return e["dtype"], list(e["shape"])

    def tensor(self, name: str) -> np.ndarray:
        """A BF16 / F16 / F32 tensor as float64."""
        dt, shape, b = self.raw(name)
        return plain(dt, b, name).reshape(shape)


# --------------------------------------------------------------------------------------------- scalars


def plain(dt: str, b: bytes, name: str) -> np.ndarray:
    if dt == "F32":
        x = np.frombuffer(b, dtype="<f4").astype(np.float64)
    elif dt == "F16":
        x = np.frombuffer(b, dtype="<f2").astype(np.float64)
    elif dt == "BF16":
        # BF16 is the high half of an IEEE float32
        x = (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        raise SystemExit(f"{name}: dtype {dt} is not a plain float (BF16/F16/F32)")
    if not np.all(np.isfinite(x)):
        raise SystemExit(f"{name}: non-finite value at flat index {int(np.argmin(np.isfinite(x)))}")
    return x


def e2m1_table() -> np.ndarray:
    """OCP E2M1: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa; exponent 0 is subnormal (m * 0.5)."""
    t = []
    for n in range(16):
        s = -1.0 if n & 8 else 1.0
        e, m = (n >> 1) & 3, n & 1
        t.append(s * (m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)))
    return np.array(t)


def e4m3_table() -> np.ndarray:
    """OCP E4M3 (fn): bit 7 sign, bits 6..3 exponent (bias 7), 3 mantissa bits; no Inf, S.1111.111 = NaN."""
    t = []
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            t.append(math.nan)
        elif e == 0:
            t.append(s * (m / 8) * 2.0 ** -6)
        else:
            t.append(s * (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(t)


def e8m0_table() -> np.ndarray:
    """OCP E8M0: 2^(u8 - 127), 0xFF = NaN."""
    t = np.exp2(np.arange(256, dtype=np.float64) - 127.0)
    t[255] = math.nan
    return t


E2M1 = e2m1_table()
E4M3 = e4m3_table()
E8M0 = e8m0_table()
assert list(E2M1) == [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]
assert E4M3[0x7E] == 448 and E4M3[0x38] == 1 and E4M3[0x01] == 2.0 ** -9 and math.isnan(E4M3[0xFF])

# bitsandbytes' named tables (fp4-formats.md §5), to check the stored quant_map against
NF4 = np.array([-1, -0.6961928, -0.5250731, -0.3949175, -0.2844414, -0.1847734, -0.0910500, 0,
                0.0795803, 0.1609302, 0.2461123, 0.3379152, 0.4407098, 0.5626170, 0.7229568, 1])
BNB_FP4 = np.array([0, 0.0625, 8, 12, 4, 6, 2, 3, -0., -0.0625, -8, -12, -4, -6, -2, -3]) / 12
BNB_TABLES = {"nf4": NF4, "fp4": BNB_FP4}


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def nibbles(packed: np.ndarray, high_even: bool) -> np.ndarray:
    """[..., n] bytes → [..., 2n] codes: low-even puts element 2k in the low nibble, high-even in the high one."""
    lo, hi = packed & 0x0F, packed >> 4
    pair = (hi, lo) if high_even else (lo, hi)
    return np.stack(pair, axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def finite(w: np.ndarray, name: str, why: str) -> np.ndarray:
    if not np.all(np.isfinite(w)):
        i = int(np.argmin(np.isfinite(w.reshape(-1))))
        raise SystemExit(f"{name}: weight decodes to NaN/Inf at flat index {i} ({why})")
    return w


# --------------------------------------------------------------------------------------------- formats
#
# A format is what is stored for one module <m>: the first entry whose tensors are all present (with the
# right dtypes) claims it. Each decoder returns W [out, in] float64 and the tensors it read.

# The classic decoding mistakes a golden measures (how far the logits move): nibbles_swapped (the other nibble
# order), global_inverted (NVFP4's second scale multiplied where it divides, or the reverse),
# scale_off_by_one (E8M0 read as 2^(s - 126)), absmax_offset_dropped (bitsandbytes double quant without
# nested_offset).


class Linear:
    def __init__(self, fmt: str, w: np.ndarray, tensors: dict, info: dict | None = None):
        self.fmt, self.w, self.tensors, self.info = fmt, w, tensors, info or {}


def detect(ck: Checkpoint, m: str) -> str:
    has = ck.has
    dt = lambda n: ck.dtype_shape(n)[0]
    if has(f"{m}.weight_packed"):
        if not has(f"{m}.weight_scale"):
            raise SystemExit(f"{m}.weight_packed without {m}.weight_scale")
        return "ct-nvfp4" if dt(f"{m}.weight_scale") == "F8_E4M3" else "ct-mxfp4"
    if not has(f"{m}.weight"):
        raise SystemExit(f"{ck.dir}: no {m}.weight nor {m}.weight_packed")
    if any(has(f"{m}.weight.quant_state.bitsandbytes__{q}") for q in ("nf4", "fp4")):
        return "bnb"
    if dt(f"{m}.weight") in ("BF16", "F16", "F32"):
        return "plain"
    if has(f"{m}.weight_scale_2"):
        return "modelopt-nvfp4"
    if has(f"{m}.weight_scale"):
        return "quark-mxfp4"
    raise SystemExit(f"{m}.weight: {dt(f'{m}.weight')} with no scale tensor fits no format")


def expect(ck: Checkpoint, name: str, dtypes, shape) -> tuple[str, bytes]:
    dt, sh, b = ck.raw(name)
    if dt not in dtypes or (shape is not None and sh != list(shape)):
        raise SystemExit(f"{name}: stored {dt} {sh}, expected {'/'.join(dtypes)} {shape}")
    return dt, b


def decode_mx(ck, m, wname, out, inn, mistake=None) -> Linear:
    """§1/§3: W[o, i] = E2M1[nib(o, i)] * 2^(scale[o, i // 32] - 127), low-even."""
    if inn % 32:
        raise SystemExit(f"{m}: in = {inn} is not a multiple of 32")
    _, bw = expect(ck, wname, ["U8"], [out, inn // 2])
    _, bs = expect(ck, f"{m}.weight_scale", ["U8", "F8_E8M0"], [out, inn // 32])
    codes = nibbles(np.frombuffer(bw, np.uint8).reshape(out, inn // 2), high_even=mistake == "nibbles_swapped")
    sc = np.frombuffer(bs, np.uint8).reshape(out, inn // 32).astype(np.int64)
    scale = E8M0[sc] * (2.0 if mistake == "scale_off_by_one" else 1.0)  # the mistake: 2^(s - 126)
    w = finite(E2M1[codes] * np.repeat(scale, 32, axis=1), wname, "E8M0 0xFF is NaN")
    e = sc - 127
    # spec §6: 2^e outside FP16's normal range (2^-14..2^15) is where an FP16 scale would lose the block
    info = {"scale_exp_min": int(e.min()), "scale_exp_max": int(e.max()), "blocks": int(e.size),
            "blocks_scale_outside_f16_normal": int(np.sum((e < -14) | (e > 15)))}
    return Linear("", w, {"weight": wname, "weight_scale": f"{m}.weight_scale"}, info)


def decode_nv(ck, m, wname, gname, op, out, inn, mistake=None) -> Linear:
    """§2/§3: s = f32(e4m3(scale[o, i // 16]) op g) in float32, W = f32(E2M1[nib] * s), low-even."""
    if inn % 16:
        raise SystemExit(f"{m}: in = {inn} is not a multiple of 16")
    _, bw = expect(ck, wname, ["U8"], [out, inn // 2])
    _, bs = expect(ck, f"{m}.weight_scale", ["F8_E4M3"], [out, inn // 16])
    gdt, gsh, gb = ck.raw(gname)
    if gdt != "F32" or gsh not in ([], [1]):
        raise SystemExit(f"{gname}: stored {gdt} {gsh}, expected F32 [] or [1]")
    g = np.frombuffer(gb, "<f4")[0]
    if not (np.isfinite(g) and g > 0):
        raise SystemExit(f"{gname} = {g}: must be finite and positive")
    codes = nibbles(np.frombuffer(bw, np.uint8).reshape(out, inn // 2), high_even=mistake == "nibbles_swapped")
    e = E4M3[np.frombuffer(bs, np.uint8).reshape(out, inn // 16)].astype(np.float32)
    if mistake == "global_inverted":
        op = "div" if op == "mul" else "mul"
    s = e * g if op == "mul" else e / g  # float32 × float32 in numpy: one IEEE rounding, as the producers
    assert s.dtype == np.float32
    w = f32(E2M1[codes] * np.repeat(s.astype(np.float64), 16, axis=1)).astype(np.float64)
    w = finite(w, wname, f"E4M3 NaN in {m}.weight_scale")
    tensors = {"weight": wname, "weight_scale": f"{m}.weight_scale", gname.rsplit(".", 1)[1]: gname}
    for extra in ("input_scale", "input_global_scale"):
        if ck.has(f"{m}.{extra}"):
            tensors[extra] = f"{m}.{extra}"
    nz = s[s > 0]
    info = {gname.rsplit(".", 1)[1]: float(g), "op": op, "blocks": int(s.size),
            "block_scale_min_nonzero": float(nz.min()) if nz.size else None, "block_scale_max": float(s.max()),
            # spec §6: e4m3 op g below FP16's smallest normal 2^-14 (formed in FP16 it would lose bits)
            "blocks_scale_below_f16_normal": int(np.sum((s > 0) & (s < 2.0 ** -14)))}
    if ck.has(f"{m}.input_scale"):
        info["input_scale"] = float(ck.tensor(f"{m}.input_scale").reshape(-1)[0])
    if ck.has(f"{m}.input_global_scale"):
        info["input_global_scale"] = float(ck.tensor(f"{m}.input_global_scale").reshape(-1)[0])
    return Linear("", w, tensors, info)


def decode_bnb(ck, m, out, inn, mistake=None) -> Linear:
    """§5: codes high-even over the flattened [out, in]; absmax per block (double quant: U8 codes of a nested
    blockwise quantization plus an offset); W_flat[j] = f32(quant_map[code_j] * absmax[j // blocksize])."""
    qs = [q for q in ("nf4", "fp4") if ck.has(f"{m}.weight.quant_state.bitsandbytes__{q}")]
    if len(qs) != 1:
        raise SystemExit(f"{m}: expected exactly one weight.quant_state.bitsandbytes__nf4|fp4, found {qs}")
    qname = f"{m}.weight.quant_state.bitsandbytes__{qs[0]}"
    _, qb = expect(ck, qname, ["U8"], None)
    st = json.loads(qb.decode("utf-8"))
    qt = st.get("quant_type", qs[0])
    if qt != qs[0]:
        raise SystemExit(f"{qname}: quant_type {qt!r} disagrees with the tensor's name")
    if list(st["shape"]) != [out, inn]:
        raise SystemExit(f"{qname}: shape {st['shape']} disagrees with the config's [{out}, {inn}]")
    n = out * inn
    bsz = int(st["blocksize"])
    nblocks = -(-n // bsz)
    _, bw = expect(ck, f"{m}.weight", ["U8"], [(n + 1) // 2, 1])
    _, bq = expect(ck, f"{m}.weight.quant_map", ["F32"], [16])
    qmap = np.frombuffer(bq, "<f4")
    nested = ck.has(f"{m}.weight.nested_absmax")
    tensors = {"weight": f"{m}.weight", "absmax": f"{m}.weight.absmax", "quant_map": f"{m}.weight.quant_map", "quant_state": qname}
    if nested:
        nbs = int(st["nested_blocksize"])
        _, ba = expect(ck, f"{m}.weight.absmax", ["U8"], [nblocks])
        _, bn = expect(ck, f"{m}.weight.nested_absmax", ["F32"], [-(-nblocks // nbs)])
        _, bnq = expect(ck, f"{m}.weight.nested_quant_map", ["F32"], [256])
        nabs = np.frombuffer(bn, "<f4")
        nqm = np.frombuffer(bnq, "<f4")
        codes_a = np.frombuffer(ba, np.uint8)
        absmax = nqm[codes_a] * nabs[np.arange(nblocks) // nbs]  # float32 × float32
        if mistake != "absmax_offset_dropped":
            absmax = absmax + np.float32(st["nested_offset"])  # float32 + float32
        tensors.update(nested_absmax=f"{m}.weight.nested_absmax", nested_quant_map=f"{m}.weight.nested_quant_map")
    else:
        _, ba = expect(ck, f"{m}.weight.absmax", ["F32"], [nblocks])
        absmax = np.frombuffer(ba, "<f4")
    assert absmax.dtype == np.float32
    codes = nibbles(np.frombuffer(bw, np.uint8).reshape(1, -1), high_even=mistake != "nibbles_swapped").reshape(-1)[:n]
    wf = qmap[codes] * absmax[np.arange(n) // bsz]  # float32 × float32
    assert wf.dtype == np.float32
    w = finite(wf.astype(np.float64).reshape(out, inn), f"{m}.weight", "absmax or quant_map")
    named = BNB_TABLES[qt]
    dev = float(np.max(np.abs(qmap.astype(np.float64) - named)))
    info = {"quant_type": qt, "blocksize": bsz, "double_quant": nested, "dtype": st.get("dtype"),
            "quant_map_vs_named_table_max_abs": dev, "quant_map_is_named_table": dev <= 1e-7}
    if not info["quant_map_is_named_table"]:
        print(f"note: {m}.weight.quant_map differs from the named {qt} table by up to {dev:.3e}; decoded with the stored one")
    if nested:
        info.update(nested_blocksize=nbs, nested_offset=float(st["nested_offset"]))
    return Linear("", w, tensors, info)


def decode_linear(ck: Checkpoint, m: str, out: int, inn: int, mistake=None) -> Linear:
    fmt = detect(ck, m)
    if fmt == "plain":
        dt, b = expect(ck, f"{m}.weight", ["BF16", "F16", "F32"], [out, inn])
        lin = Linear("", plain(dt, b, f"{m}.weight").reshape(out, inn), {"weight": f"{m}.weight"}, {"dtype": dt})
    elif fmt in ("quark-mxfp4", "ct-mxfp4"):
        lin = decode_mx(ck, m, f"{m}.weight" if fmt == "quark-mxfp4" else f"{m}.weight_packed", out, inn, mistake)
    elif fmt == "modelopt-nvfp4":
        lin = decode_nv(ck, m, f"{m}.weight", f"{m}.weight_scale_2", "mul", out, inn, mistake)
    elif fmt == "ct-nvfp4":
        lin = decode_nv(ck, m, f"{m}.weight_packed", f"{m}.weight_global_scale", "div", out, inn, mistake)
    else:
        lin = decode_bnb(ck, m, out, inn, mistake)
        fmt = f"bnb-{lin.info['quant_type']}"
    lin.fmt = fmt
    return lin


# --------------------------------------------------------------------------------------------- quantization_config


def _re_or_glob(pat: str, name: str, re_fn) -> bool:
    return bool(re_fn(pat[3:], name)) if pat.startswith("re:") else fnmatch.fnmatchcase(name, pat)


def expected_format(qc: dict | None, m: str) -> str:
    """What the producer's quantization_config says module m (a Linear) must be stored as; refuses by name
    the schemes of the same producers this golden does not decode."""
    if qc is None:
        return "plain"
    meth = qc.get("quant_method")
    if meth == "quark":
        for p in qc.get("exclude") or []:
            if _re_or_glob(p, m, re.fullmatch):
                return "plain"
        spec = None
        for p, s in (qc.get("layer_quant_config") or {}).items():
            if fnmatch.fnmatchcase(m, p):
                spec = s
                break
        if spec is None:
            spec = (qc.get("layer_type_quant_config") or {}).get("Linear") or qc["global_quant_config"]
        w = spec.get("weight")
        if w is None:
            return "plain"
        if isinstance(w, list) or (w.get("dtype"), w.get("qscheme"), w.get("group_size"), w.get("scale_format")) != ("fp4", "per_group", 32, "e8m0"):
            raise SystemExit(f"quark weight spec {w} for {m} is not MXFP4 (fp4 per_group 32 e8m0): not decoded here")
        return "quark-mxfp4"
    if meth == "modelopt":
        algo = qc.get("quant_algo")
        if algo != "NVFP4":
            raise SystemExit(f"modelopt quant_algo {algo!r}: only NVFP4 is decoded here")
        ignore = qc.get("ignore") or qc.get("exclude_modules") or []
        if any(fnmatch.fnmatchcase(m, p) for p in ignore):
            return "plain"
        for g in (qc.get("config_groups") or {}).values():
            gs = (g.get("weights") or {}).get("group_size", 16)
            if gs != 16:
                raise SystemExit(f"modelopt NVFP4 group_size {gs}: only 16 is decoded here")
        return "modelopt-nvfp4"
    if meth == "compressed-tensors":
        match = lambda p: (bool(re.match(p[3:], m)) if p.startswith("re:") else (p == m or p == "Linear"))
        if any(match(p) for p in qc.get("ignore") or []):
            return "plain"
        for g in (qc.get("config_groups") or {}).values():
            if any(match(t) for t in g.get("targets") or []):
                fmt = g.get("format") or qc.get("format")
                w = g.get("weights") or {}
                want = {"nvfp4-pack-quantized": ("ct-nvfp4", "tensor_group", 16), "mxfp4-pack-quantized": ("ct-mxfp4", "group", 32)}
                if fmt not in want:
                    raise SystemExit(f"compressed-tensors format {fmt!r} for {m}: only nvfp4-/mxfp4-pack-quantized are decoded here")
                fid, strategy, gs = want[fmt]
                if (w.get("num_bits"), w.get("type"), w.get("strategy"), w.get("group_size")) != (4, "float", strategy, gs):
                    raise SystemExit(f"compressed-tensors weights {w} for {m} disagree with {fmt}")
                return fid
        return "plain"
    if meth == "bitsandbytes":
        if not qc.get("load_in_4bit"):
            raise SystemExit("bitsandbytes without load_in_4bit (8-bit): not decoded here")
        skip = qc.get("llm_int8_skip_modules") or []
        # transformers skips a module when a skip entry occurs in its dotted name
        if any(k in m for k in skip):
            return "plain"
        qt = qc.get("bnb_4bit_quant_type", "fp4")
        if qt not in BNB_TABLES:
            raise SystemExit(f"bnb_4bit_quant_type {qt!r}: only nf4 and fp4 exist")
        return f"bnb-{qt}"
    raise SystemExit(f"quant_method {meth!r} is not one of quark, modelopt, compressed-tensors, bitsandbytes")


# --------------------------------------------------------------------------------------------- model

LINEARS = [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
           ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj")]


def rmsnorm(x, w, eps):
    """LlamaRMSNorm: w * x / sqrt(mean(x^2) + eps)."""
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def silu(x):
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x: x / inf = -0, the limit
        return x / (1.0 + np.exp(-x))


def softmax(z):
    z = z - np.max(z, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


class Llama:
    def __init__(self, ck: Checkpoint, mistake: str | None = None):
        c = ck.config
        self.ck, self.c = ck, c
        self.H = c["hidden_size"]
        self.NH = c["num_attention_heads"]
        self.NKV = c.get("num_key_value_heads") or self.NH
        self.d = c.get("head_dim") or self.H // self.NH
        self.I = c["intermediate_size"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.V = c["vocab_size"]
        if c.get("hidden_act", "silu") != "silu":
            raise SystemExit(f"hidden_act {c['hidden_act']!r}: only silu is implemented")
        self.qc = c.get("quantization_config")
        self.mistake = mistake
        self.linears: dict[str, Linear] = {}
        head = "model.embed_tokens.weight" if c.get("tie_word_embeddings", False) else "lm_head.weight"
        if not c.get("tie_word_embeddings", False) and expected_format(self.qc, "lm_head") != "plain":
            raise SystemExit(f"quantization_config quantizes lm_head ({expected_format(self.qc, 'lm_head')}): not decoded here")
        self.head = head

    def shapes(self):
        H, NH, NKV, d, I = self.H, self.NH, self.NKV, self.d, self.I
        return {"q_proj": (NH * d, H), "k_proj": (NKV * d, H), "v_proj": (NKV * d, H), "o_proj": (H, NH * d),
                "gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}

    def load(self):
        sh = self.shapes()
        for L in range(self.c["num_hidden_layers"]):
            for sub, key in LINEARS:
                m = f"model.layers.{L}.{sub}.{key}"
                lin = decode_linear(self.ck, m, *sh[key], mistake=self.mistake)
                want = expected_format(self.qc, m)
                if lin.fmt != want:
                    raise SystemExit(f"{m}: stored as {lin.fmt}, but quantization_config ({(self.qc or {}).get('quant_method')}) says {want}")
                self.linears[m] = lin
        return self

    def inv_freq(self):
        """LlamaRotaryEmbedding: base^(-2i/d); rope_type llama3 rescales by wavelength (_compute_llama3_parameters)."""
        d = self.d
        base = self.c.get("rope_theta", 10000.0)
        inv = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
        rs = self.c.get("rope_scaling")
        kind = None if rs is None else rs.get("rope_type", rs.get("type"))
        if kind in (None, "default"):
            return inv, "default"
        if kind != "llama3":
            raise SystemExit(f"rope_scaling {rs}: only default and llama3 are implemented")
        factor, lo, hi, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        low_wl, high_wl = orig / lo, orig / hi
        wl = 2 * math.pi / inv
        scaled = np.where(wl > low_wl, inv / factor, inv)
        smooth = (orig / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wl >= high_wl) & (wl <= low_wl)
        return np.where(medium, smoothed, scaled), "llama3"

    @staticmethod
    def rope(x, cos, sin):
        """x [S, heads, d]; rotate_half: x * cos + cat(-x2, x1) * sin, cos/sin = cat(freqs, freqs)."""
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def proj(self, L, sub, key, x):
        m = f"model.layers.{L}.{sub}.{key}"
        y = x @ self.linears[m].w.T
        bias = self.c.get("attention_bias") if sub == "self_attn" else self.c.get("mlp_bias")
        if bias:
            y = y + self.ck.tensor(f"{m}.bias")
        return y

    def attention(self, L, x, cos, sin):
        S = x.shape[0]
        q = self.rope(self.proj(L, "self_attn", "q_proj", x).reshape(S, self.NH, self.d), cos, sin)
        k = self.rope(self.proj(L, "self_attn", "k_proj", x).reshape(S, self.NKV, self.d), cos, sin)
        v = self.proj(L, "self_attn", "v_proj", x).reshape(S, self.NKV, self.d)
        group = self.NH // self.NKV  # repeat_kv: query head h reads kv head h // group
        causal = np.arange(S)[None, :] <= np.arange(S)[:, None]
        o = np.zeros((S, self.NH, self.d))
        for h in range(self.NH):
            z = (q[:, h, :] @ k[:, h // group, :].T) / math.sqrt(self.d)
            o[:, h, :] = softmax(np.where(causal, z, -np.inf)) @ v[:, h // group, :]
        return self.proj(L, "self_attn", "o_proj", o.reshape(S, self.NH * self.d))

    def mlp(self, L, x):
        return self.proj(L, "mlp", "down_proj", silu(self.proj(L, "mlp", "gate_proj", x)) * self.proj(L, "mlp", "up_proj", x))

    def forward(self, tokens):
        ck, S = self.ck, len(tokens)
        res = {}
        x = ck.tensor("model.embed_tokens.weight")[tokens]
        res["embed"] = x
        inv, _ = self.inv_freq()
        ang = np.arange(S, dtype=np.float64)[:, None] * inv[None, :]
        ang = np.concatenate([ang, ang], axis=-1)
        cos, sin = np.cos(ang), np.sin(ang)
        for L in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{L}"
            a = self.attention(L, rmsnorm(x, ck.tensor(f"{p}.input_layernorm.weight"), self.eps), cos, sin)
            x = x + a
            mo = self.mlp(L, rmsnorm(x, ck.tensor(f"{p}.post_attention_layernorm.weight"), self.eps))
            x = x + mo
            res[f"layer.{L}"] = x
            res[f"layer.{L}.attn"] = a
            res[f"layer.{L}.mlp"] = mo
        f = rmsnorm(x, ck.tensor("model.norm.weight"), self.eps)
        res["final_norm"] = f
        head = self.head
        hdt = ck.dtype_shape(head)[0]
        if hdt not in ("BF16", "F16", "F32"):
            raise SystemExit(f"{head}: {hdt}, the head must be plain (BF16/F16/F32)")
        res["logits"] = f @ ck.tensor(head).T
        return res


# --------------------------------------------------------------------------------------------- output


def f32_sha256(w: np.ndarray) -> str:
    """sha256 of the weight's float32 bytes (LE, row-major), -0 written as +0; w must be exact in float32."""
    w32 = (w + 0.0).astype("<f4")
    assert np.array_equal(w32.astype(np.float64), w + 0.0), "weight not exact in float32"
    return hashlib.sha256(w32.tobytes()).hexdigest()


def format_info(model: Llama) -> dict:
    by_fmt: dict[str, list[str]] = {}
    linears = {}
    for m, lin in model.linears.items():
        by_fmt.setdefault(lin.fmt, []).append(m)
        linears[m] = {"format": lin.fmt, "tensors": lin.tensors, "dequant_f32_sha256": f32_sha256(lin.w), **lin.info}
    qc = model.qc or {}
    return {"quant_method": qc.get("quant_method"), "modules_by_format": by_fmt, "linears": linears}


def mistakes_for(model: Llama) -> list[str]:
    fmts = {lin.fmt for lin in model.linears.values()}
    out = []
    if fmts & {"quark-mxfp4", "ct-mxfp4", "modelopt-nvfp4", "ct-nvfp4", "bnb-nf4", "bnb-fp4"}:
        out.append("nibbles_swapped")
    if fmts & {"modelopt-nvfp4", "ct-nvfp4"}:
        out.append("global_inverted")
    if fmts & {"quark-mxfp4", "ct-mxfp4"}:
        out.append("scale_off_by_one")
    if any(lin.info.get("double_quant") for lin in model.linears.values()):
        out.append("absmax_offset_dropped")
    return out


# --------------------------------------------------------------------------------------------- self-test


def bnb_quantize(w: np.ndarray, qt: str, double: bool, bs=64, nbs=256) -> dict:
    """The spec's rule in numpy, for the self-test only: blocks of `bs` over the flattened row-major tensor,
    absmax = max |w| per block, code = the nearest quant_map entry to w / absmax, two codes a byte high-even
    (an odd count padded with a zero code). With double quant the absmax values are then quantized
    themselves: offset = mean(absmax), blocks of `nbs` of (absmax - offset) over their own absmax, each to the
    nearest entry of a 256-entry signed table (a sorted linear one here; the decoder reads whatever is
    stored). Returns the tensors as bitsandbytes names them, plus the codes and the absmax the decoder must
    rebuild, for the checks."""
    qmap = BNB_TABLES[qt].astype(np.float32)
    out, inn = w.shape
    flat = w.reshape(-1).astype(np.float32)
    n = flat.size
    nblocks = -(-n // bs)
    pad = np.zeros(nblocks * bs, np.float32)
    pad[:n] = flat
    absmax = np.max(np.abs(pad.reshape(nblocks, bs)), axis=1).astype(np.float32)
    a = np.repeat(np.where(absmax == 0, np.float32(1), absmax), bs)[:n]
    codes = np.argmin(np.abs((flat / a)[:, None] - qmap[None, :]), axis=1).astype(np.uint8)
    padded = np.concatenate([codes, np.zeros(n % 2, np.uint8)])
    t = {"weight": ((padded[0::2] << 4) | padded[1::2]).astype(np.uint8).reshape(-1, 1), "quant_map": qmap}
    st = {"quant_type": qt, "blocksize": bs, "dtype": "bfloat16", "shape": [out, inn]}
    decoded_absmax = absmax
    if double:
        nqm = np.linspace(-1, 1, 256).astype(np.float32)
        offset = np.float32(np.mean(absmax))
        centred = absmax - offset
        nn = -(-nblocks // nbs)
        cp = np.zeros(nn * nbs, np.float32)
        cp[:nblocks] = centred
        nabs = np.max(np.abs(cp.reshape(nn, nbs)), axis=1).astype(np.float32)
        nabs[nabs == 0] = 1
        acode = np.argmin(np.abs((centred / np.repeat(nabs, nbs)[:nblocks])[:, None] - nqm[None, :]), axis=1).astype(np.uint8)
        t.update(absmax=acode, nested_absmax=nabs, nested_quant_map=nqm)
        st.update(nested_blocksize=nbs, nested_dtype="float32", nested_offset=float(offset))
        decoded_absmax = (nqm[acode] * nabs[np.arange(nblocks) // nbs]) + offset
    else:
        t["absmax"] = absmax
    return {"tensors": t, "state": st, "codes": codes, "absmax": absmax, "decoded_absmax": decoded_absmax.astype(np.float32)}


def write_bnb_checkpoint(d: str, m: str, q: dict, qmap_override=None):
    t = dict(q["tensors"])
    if qmap_override is not None:
        t["quant_map"] = qmap_override.astype(np.float32)
    qt = q["state"]["quant_type"]
    tensors = [(f"{m}.weight.{k}" if k != "weight" else f"{m}.weight", v) for k, v in t.items()]
    tensors.append((f"{m}.weight.quant_state.bitsandbytes__{qt}", np.frombuffer(json.dumps(q["state"]).encode("utf-8"), np.uint8)))
    write_safetensors(os.path.join(d, "model.safetensors"), tensors, {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": qt,
                                           "bnb_4bit_use_double_quant": "nested_absmax" in t, "llm_int8_skip_modules": ["lm_head"]}}, f)


def self_test() -> int:
    """The bitsandbytes decoder (no fixture exists yet) on numpy-quantized matrices written as checkpoints
    and read back through this script's own parser: nf4/fp4, with and without double quant, odd out·in,
    more than one nested block. Each case checks that the decoder (1) equals the element rule applied by
    hand to the known codes and absmax, bit for bit; (2) reconstructs w within the quantization bound;
    (3) differs from the wrong (low-even) nibble order by far; (4) agrees with quantization_config."""
    rng = np.random.default_rng(7)
    cases = [("nf4", True, (24, 40)), ("fp4", False, (24, 40)), ("nf4", True, (7, 9)), ("fp4", True, (33, 65)),
             ("nf4", False, (5, 13)), ("nf4", True, (300, 192))]
    m = "model.layers.0.mlp.up_proj"
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for qt, double, (out, inn) in cases:
            w = (rng.standard_normal((out, inn)) * np.exp(rng.uniform(-3, 1, (out, 1)))).astype(np.float32)
            q = bnb_quantize(w, qt, double)
            write_bnb_checkpoint(d, m, q)
            ck = Checkpoint(d)
            lin = decode_linear(ck, m, out, inn)
            want = expected_format(ck.config["quantization_config"], m)
            n = out * inn
            qm, da = q["tensors"]["quant_map"], q["decoded_absmax"]
            byhand = np.array([np.float32(qm[q["codes"][j]] * da[j // 64]) for j in range(n)], np.float64).reshape(out, inn)
            exact = np.array_equal(lin.w, byhand)
            # |W - w| <= half the widest gap of the table · absmax + what double quant moved absmax by
            gap = float(np.max(np.diff(np.sort(BNB_TABLES[qt]))) / 2)
            per_block = gap * q["absmax"].astype(np.float64) + np.abs(da.astype(np.float64) - q["absmax"]) * (1 + 1e-6)
            bound = np.repeat(per_block * (1 + 1e-6), 64)[:n].reshape(out, inn)
            within = bool(np.all(np.abs(lin.w - w) <= bound))
            swapped = decode_linear(ck, m, out, inn, mistake="nibbles_swapped").w
            far = rel_l2(swapped, w) > 5 * rel_l2(lin.w, w)
            ok = exact and within and far and lin.fmt == want == f"bnb-{qt}" and lin.info["quant_map_is_named_table"] and lin.info["double_quant"] == double
            fails += not ok
            print(f"bnb_decode(quant_type={qt},double_quant={double},shape=[{out},{inn}]): {'ok' if ok else 'FAIL'} "
                  f"bit-exact={exact} within_bound={within} rel_l2_vs_w={rel_l2(lin.w, w):.3e} "
                  f"low_even_rel_l2={rel_l2(swapped, w):.3e} format={lin.fmt} config={want}")
        # a stored quant_map that is not the named table: decoded with the stored one, and said so
        q = bnb_quantize(rng.standard_normal((4, 64)).astype(np.float32), "nf4", False)
        write_bnb_checkpoint(d, m, q, qmap_override=NF4 * 0.5)
        lin = decode_linear(Checkpoint(d), m, 4, 64)
        codes = q["codes"].reshape(4, 64)
        ok = (not lin.info["quant_map_is_named_table"]) and np.array_equal(lin.w, f32(NF4 * 0.5)[codes] * np.repeat(q["absmax"], 64).reshape(4, 64))
        fails += not ok
        print(f"bnb_decode(quant_map=0.5·NF4): {'ok' if ok else 'FAIL'} flagged={not lin.info['quant_map_is_named_table']}")
    print("self-test", "passed" if fails == 0 else f"FAILED ({fails} cases)")
    return 1 if fails else 0


# --------------------------------------------------------------------------------------------- main


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", help="checkpoint folder, e.g. fixtures/formats/llama-tiny-ct-nvfp4")
    ap.add_argument("--out", help="golden folder (default: <fixture>-golden)")
    ap.add_argument("--tokens", type=int, default=40, help="sequence length (BOS + seeded ids)")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--self-test", action="store_true", help="check the bitsandbytes decoder on numpy-quantized matrices and exit")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.fixture is None:
        ap.error("--fixture is required (or --self-test)")
    out_dir = a.out or a.fixture.rstrip("/") + "-golden"
    ck = Checkpoint(a.fixture)
    c = ck.config
    if a.tokens > c.get("max_position_embeddings", a.tokens):
        raise SystemExit(f"--tokens {a.tokens} exceeds max_position_embeddings {c['max_position_embeddings']}")
    bos = c.get("bos_token_id")
    if not isinstance(bos, int):
        raise SystemExit("config.json has no integer bos_token_id")
    rng = np.random.default_rng(a.seed)
    tokens = [bos] + [int(t) for t in rng.integers(2, c["vocab_size"], a.tokens - 1)]

    model = Llama(ck).load()
    res = model.forward(tokens)
    info = format_info(model)
    sensitivity = {}
    for mk in mistakes_for(model):
        r = Llama(ck, mk).load().forward(tokens)
        sensitivity[mk] = {"logits_rel_l2_change": rel_l2(r["logits"], res["logits"])}
        print(f"mistake {mk:18s} logits rel_l2 change {sensitivity[mk]['logits_rel_l2_change']:.3e}")
    info["mistakes"] = sensitivity

    tensors = [("tokens", np.array(tokens, dtype=np.int64))] + [(k, v) for k, v in res.items()]
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "golden.safetensors"), tensors, {"generator": GENERATOR})
    # what float32 storage of the golden itself costs, per stage (the test's bound must sit well above it)
    storage = {k: rel_l2(v.astype(np.float32).astype(np.float64), v) for k, v in res.items()}
    _, rope_kind = model.inv_freq()
    meta = {
        "generator": f"{GENERATOR} (float64 numpy, written from spec/fp4-formats.md and transformers' LlamaForCausalLM)",
        "fixture": os.path.relpath(os.path.abspath(a.fixture), root),
        "fixture_sha256": {f: s.sha256 for f, s in ck.shards.items()},
        "config_sha256": ck.config_sha256,
        "tokens": tokens,
        "tokens_rule": f"[bos_token_id] + numpy.random.default_rng({a.seed}).integers(2, vocab_size, {a.tokens - 1})",
        "stages": list(res.keys()),
        "conventions": [
            "positions 0..S-1 (prefill), every stage at every position",
            f"RoPE rotate_half, rope_type {rope_kind}, theta {c.get('rope_theta', 10000)}; causal GQA attention scaled by head_dim^-1/2",
            "LlamaRMSNorm w * x / sqrt(mean(x^2) + rms_norm_eps); SwiGLU down(silu(gate) * up)",
            "weights dequantized as the producer's float32 arithmetic forms them (see the script's docstring), activations float64",
            "stages stored as F32: golden_storage_rel_l2 is what that rounding alone costs",
        ],
        "golden_storage_rel_l2_max": max(storage.values()),
        "format": info,
    }
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{meta['fixture']}: {', '.join(f'{k} ×{len(v)}' for k, v in info['modules_by_format'].items())} → {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
