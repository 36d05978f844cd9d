#!/usr/bin/env python3
"""Check a file written by lem's safetensors writer with the reference library.

Produce the file with the Go test, then read it here:

    LEM_WRITE_SAFETENSORS=/tmp/lem.safetensors \
        go test -run TestWriteForReference ./safetensors/
    python3 safetensors/testdata/check_reference.py /tmp/lem.safetensors

Needs `safetensors` and `numpy`; with `torch` installed it also checks the
BF16 and F8 tensors, which numpy cannot represent. The expected values mirror
sampleTensors in safetensors/write_test.go; keep the two in step.

Exits non-zero, listing every mismatch, if anything differs.
"""

import json
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

QUOTED = 'name with "quotes" / \u00fc <&>'

# name -> (numpy dtype, shape, values)
NUMPY_EXPECTED = {
    "f64": (np.float64, (2, 3), [i * 0.25 - 0.5 for i in range(6)]),
    "f32": (np.float32, (2, 3), [i * 1.5 - 3 for i in range(6)]),
    "f16": (np.float16, (5,), [0, 1, -2, 0.5, 65504]),
    "i8": (np.int8, (4,), [-128, -1, 0, 127]),
    "u8": (np.uint8, (3,), [0, 1, 255]),
    "i16": (np.int16, (3,), [-32768, 0, 32767]),
    "u16": (np.uint16, (2,), [0, 65535]),
    "i32": (np.int32, (3,), [-(2**31), 7, 2**31 - 1]),
    "u32": (np.uint32, (2,), [0, 2**32 - 1]),
    "i64": (np.int64, (2,), [-(2**63), 2**63 - 1]),
    "u64": (np.uint64, (2,), [0, 2**64 - 1]),
    "bool": (np.bool_, (3,), [True, False, True]),
    "scalar": (np.float32, (), 42.0),
    "empty": (np.float32, (0, 4), []),
    QUOTED: (np.float32, (1,), [7.0]),
}

# name -> (torch dtype name, shape, values as float)
TORCH_EXPECTED = {
    "bf16": ("bfloat16", (2, 2), [1.0, -1.5, 3.140625, 256.0]),
    "f8_e4m3": ("float8_e4m3fn", (4,), [1.0, -1.0, 448.0, 2.0**-9]),
    "f8_e5m2": ("float8_e5m2", (4,), [1.0, -1.0, 57344.0, 2.0**-16]),
}

METADATA = {"format": "pt", "lem": 'test <&> "quoted"'}

ORDER = [
    "f64", "f32", "f16", "bf16", "f8_e4m3", "f8_e5m2", "i8", "u8", "i16",
    "u16", "i32", "u32", "i64", "u64", "bool", "scalar", "empty", QUOTED,
]


def main(path):
    errors = []

    def expect(cond, msg):
        if not cond:
            errors.append(msg)

    # Layout, read by hand: header length, padding, key order, contiguity.
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    expect(n % 8 == 0, f"header length {n} is not a multiple of 8")
    header_text = raw[8 : 8 + n].decode("utf-8")
    expect(header_text.startswith('{"__metadata__":'), "header does not start with __metadata__")
    body = header_text.rstrip(" ")
    expect(body.endswith("}") and len(header_text) - len(body) < 8, "header is not JSON padded with fewer than 8 spaces")
    header = json.loads(header_text)
    keys = [k for k in header if k != "__metadata__"]
    expect(keys == ORDER, f"tensor order {keys}, want {ORDER}")
    offset = 0
    for k in keys:
        begin, end = header[k]["data_offsets"]
        expect(begin == offset, f"{k}: begins at {begin}, want {offset} (contiguous)")
        offset = end
    expect(8 + n + offset == len(raw), f"file is {len(raw)} bytes, want {8 + n + offset}")

    # Metadata through the reference reader.
    with safe_open(path, framework="np") as f:
        expect(f.metadata() == METADATA, f"metadata {f.metadata()}, want {METADATA}")
        expect(sorted(f.keys()) == sorted(ORDER), f"keys {sorted(f.keys())}")

    # numpy-representable tensors through load_file. It refuses files with
    # dtypes numpy lacks, so read those tensors one at a time instead.
    try:
        tensors = load_file(path)
    except Exception:  # noqa: BLE001 - bf16/f8 are not numpy dtypes
        tensors = {}
        with safe_open(path, framework="np") as f:
            for name in NUMPY_EXPECTED:
                tensors[name] = f.get_tensor(name)
    for name, (dtype, shape, values) in NUMPY_EXPECTED.items():
        t = tensors.get(name)
        if t is None:
            errors.append(f"{name}: missing")
            continue
        expect(t.dtype == np.dtype(dtype), f"{name}: dtype {t.dtype}, want {np.dtype(dtype)}")
        expect(t.shape == shape, f"{name}: shape {t.shape}, want {shape}")
        want = np.array(values, dtype=dtype).reshape(shape)
        expect(np.array_equal(t, want), f"{name}: values {t.tolist()}, want {want.tolist()}")

    try:
        import torch
        from safetensors.torch import load_file as torch_load_file
    except ImportError:
        print("torch not installed: BF16 and F8 tensors not checked")
    else:
        tt = torch_load_file(path)
        for name, (dtype, shape, values) in TORCH_EXPECTED.items():
            t = tt[name]
            expect(t.dtype == getattr(torch, dtype), f"{name}: dtype {t.dtype}, want {dtype}")
            expect(tuple(t.shape) == shape, f"{name}: shape {tuple(t.shape)}, want {shape}")
            got = t.to(torch.float64).flatten().tolist()
            expect(got == values, f"{name}: values {got}, want {values}")

    if errors:
        for e in errors:
            print("MISMATCH:", e)
        sys.exit(1)
    print(f"ok: {path} matches ({len(ORDER)} tensors)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
