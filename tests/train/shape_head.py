#!/usr/bin/env python3
"""Test fixture for the learning test: gives a tiny checkpoint's lm_head a shared component on one
token range, so that one hidden direction raises the whole range.

usage: shape_head.py MODEL.safetensors BEGIN END SCALE

Rows [BEGIN, END) of lm_head.weight get SCALE * u added, with u a fixed random unit vector. A
random tiny model's logits are nearly uniform (std about 0.16 over 151,936 tokens), and its rows
share no structure. Then the synthetic token-share reward can rise only by collapsing onto
tokens that happened to be sampled, and whether it does is chance (docs/train.md). With the shared
component, the policy gradient of every in-range sample points the same way.
"""
import json
import struct
import sys

import torch


def main():
    path, begin, end, scale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    blob = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    entry = header["lm_head.weight"]
    lo, hi = entry["data_offsets"]
    base = 8 + n
    dtype = {"BF16": torch.bfloat16, "F32": torch.float32}[entry["dtype"]]
    w = torch.frombuffer(bytearray(blob[base + lo:base + hi]), dtype=dtype).view(*entry["shape"]).float()
    u = torch.randn(w.shape[1], generator=torch.Generator().manual_seed(1234))
    w[begin:end] += scale * u / u.norm()
    blob[base + lo:base + hi] = w.to(dtype).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    open(path, "wb").write(blob)
    print(f"{path}: lm_head rows [{begin}, {end}) + {scale} * u")


if __name__ == "__main__":
    main()
