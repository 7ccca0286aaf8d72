"""Reads a safetensors file into numpy arrays, for the float64 cross-checks under scripts/ (Debian has no
safetensors package): the header's JSON, then each tensor's bytes at its data_offsets, little-endian."""
import json
import struct

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "U8": "u1"}


def read(path, dtypes=tuple(DTYPES)):
    """{name: array in its stored dtype}; SystemExit naming the tensor for a dtype outside `dtypes`."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in dtypes:
            raise SystemExit(f"{name}: dtype {t['dtype']} (expected one of {', '.join(dtypes)})")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out
