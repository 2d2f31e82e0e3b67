"""The golden scripts' shared output code: writing a safetensors file of their results, and rel_l2.

Only output lives here. Each script keeps its own safetensors reader and its own decoders, written from the
specs, so that the goldens stay independent of the tool and of each other. This writer is just I/O.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np


def write_safetensors(path: str, tensors: list, meta: dict):
    """F32 for float tensors, I64 for integer ones, U8 for uint8 (llama's bitsandbytes self-test), atomically."""
    header = {"__metadata__": meta} if meta else {}
    off = 0
    blobs = []
    for name, x in tensors:
        x = np.asarray(x)
        if x.dtype == np.int64:
            dt, b = "I64", x.astype("<i8").tobytes()
        elif x.dtype == np.uint8:
            dt, b = "U8", x.tobytes()
        else:
            dt, b = "F32", x.astype("<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))
