"""Reads a `dice ckpt export-hf` folder with readers that are not dice's own and compares every
tensor with the checkpoint it came from.

usage: export_hf_check.py CHECKPOINT_DIR EXPORT_DIR

- The checkpoint's model.h5 through h5py (HDF5's own library): one dataset per parameter, bf16
  stored as uint16 with a "dtype" attribute.
- The export's safetensors through a parser written here from the format's description: an 8-byte
  little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the data;
  a sharded export through model.safetensors.index.json's weight_map.
Checks: config.json's torch_dtype names the dtype every floating tensor was written in; each
exported tensor equals the checkpoint's rounded to that dtype (round to nearest even, computed
here with numpy); the remote-code files auto_map names are there. Exit 1 with a message otherwise.
"""
import json
import os
import struct
import sys

import h5py
import numpy as np

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64, "I32": np.int32,
             "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as fh:
        data = fh.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        arr = np.frombuffer(body[a:b], dtype=ST_DTYPES[meta["dtype"]]).reshape(meta["shape"])
        out[name] = (meta["dtype"], arr)
    return out


def read_export(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
        out = {}
        for f in files:
            out.update(read_safetensors(os.path.join(d, f)))
        wm = json.load(open(index))["weight_map"]
        assert sorted(wm) == sorted(out), "the index's weight_map does not list the shards' tensors"
        return out, len(files)
    return read_safetensors(os.path.join(d, "model.safetensors")), 1


def bf16_bits(f32):
    """fp32 -> bf16 bit patterns, round to nearest even (finite values)."""
    bits = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ckpt, exp = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(exp, "config.json")))
    want = cfg.get("torch_dtype")
    st_name = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[want]
    tensors, n_files = read_export(exp)
    with h5py.File(os.path.join(ckpt, "model.h5"), "r") as h5:
        names = sorted(k for k in h5.keys())
        assert names == sorted(tensors), "tensor names differ: %s" % (set(names) ^ set(tensors))
        for name in names:
            ds = h5[name]
            src_dtype = ds.attrs["dtype"]
            src_dtype = src_dtype.decode() if isinstance(src_dtype, bytes) else str(src_dtype)
            src = ds[()]
            dt, got = tensors[name]
            assert tuple(got.shape) == tuple(src.shape), "%s: shape %s, checkpoint %s" % (name, got.shape, src.shape)
            assert dt == st_name, "%s: written as %s, config.json says %s" % (name, dt, want)
            if src_dtype == "float32" and want == "bfloat16":
                assert np.array_equal(got, bf16_bits(src)), "%s: not the checkpoint's values rounded to bf16" % name
            elif src_dtype == want:
                assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(src).view(np.uint8)), name
            else:
                raise AssertionError("%s: checkpoint %s exported as %s: no check for that pair" % (name, src_dtype, want))
    for ref in cfg.get("auto_map", {}).values():
        f = ref.rsplit(".", 1)[0] + ".py"
        assert os.path.exists(os.path.join(exp, f)), "auto_map names %s, which the export lacks" % f
    print("export_hf_check: %d tensors in %d file(s), %s, equal to the checkpoint's; remote code %s" % (
        len(tensors), n_files, want, sorted(set(r.rsplit(".", 1)[0] + ".py" for r in cfg.get("auto_map", {}).values()))))


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("export_hf_check: %s" % e, file=sys.stderr)
        sys.exit(1)
