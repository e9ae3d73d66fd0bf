#!/usr/bin/env python3
"""Independent Qwen3 / SDAR reference forward in plain PyTorch (works with torch 1.13, no
transformers, no safetensors package), written from the architecture's equations.

usage: qwen3_reference.py MODEL_DIR CASE.safetensors TOLERANCE
  MODEL_DIR: config.json + model.safetensors (or a sharded index)
  CASE: ids [B,L] int64, positions [B,L] int64, mask [B,1,L,L] bool (true = attend), logits
        [B,L,V] (dice's output) -- compared with this script's logits.
Prints max_abs_diff and the logit scale; exits 1 when max_abs_diff > TOLERANCE.
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = bytearray(data[base + b:base + end])
        dtype = DTYPES[e["dtype"]]
        if len(buf) == 0:
            t = torch.empty(e["shape"], dtype=dtype)
        else:
            t = torch.frombuffer(buf, dtype=dtype).reshape(e["shape"]).clone()
        out[name] = t
    return out


def write_safetensors(path, tensors):
    names = {v: k for k, v in DTYPES.items()}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        w = {}
        for s in shards:
            w.update(read_safetensors(os.path.join(model_dir, s)))
        return w
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rms_norm(x, weight, eps):
    # y = w * x / sqrt(mean(x^2) + eps)
    return weight * (x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def rope(x, pos, theta):
    # x [B, heads, L, D]; pairs (x[i], x[i + D/2]) are rotated by angle pos * theta^(-2i/D).
    d = x.shape[-1]
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    angle = pos.double()[:, None, :, None] * torch.pow(float(theta), -2.0 * i / d)  # [B,1,L,half]
    c, s = torch.cos(angle).float(), torch.sin(angle).float()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def forward(cfg, w, ids, pos, mask):
    B, L = ids.shape
    H = cfg["hidden_size"]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or H // nq
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 1e6)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].t()).reshape(B, L, nq, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].t()).reshape(B, L, nkv, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].t()).reshape(B, L, nkv, d)
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps).permute(0, 2, 1, 3)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps).permute(0, 2, 1, 3)
        v = v.permute(0, 2, 1, 3)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        heads = []
        for hq in range(nq):
            hk = hq // (nq // nkv)  # query head hq reads kv head hq // group
            scores = (q[:, hq] @ k[:, hk].transpose(-1, -2)) / math.sqrt(d)  # [B, L, L]
            scores = scores.masked_fill(~mask[:, 0], float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[:, hk])
        attn = torch.stack(heads, dim=2).reshape(B, L, nq * d)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].t()
        up = h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (gate * torch.sigmoid(gate) * up) @ w[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.t()


def compare(model_dir, case_path, tol):
    """Returns True when the reference logits are within tol of the case's logits."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = {k: v.float() for k, v in read_weights(model_dir).items()}
    case = read_safetensors(case_path)
    with torch.no_grad():
        ref = forward(cfg, w, case["ids"], case["positions"], case["mask"].bool())
    got = case["logits"].float()
    diff = (ref - got).abs().max().item()
    scale = ref.abs().max().item()
    print("qwen3_reference: torch %s, logits %s, max_abs_diff %.3e, max |logit| %.3e, relative %.3e"
          % (torch.__version__, tuple(ref.shape), diff, scale, diff / max(scale, 1e-30)))
    return diff <= tol


if __name__ == "__main__":
    sys.exit(0 if compare(sys.argv[1], sys.argv[2], float(sys.argv[3])) else 1)
