#!/usr/bin/env python3
"""dice forward vs HF transformers Qwen3ForCausalLM on the same weights and SDAR block masks.

Called by tools/gpu/model_parity.sh (see there). Needs torch (CUDA), transformers, safetensors.
Writes under --out: models/<preset>/ (random weights written by `dice forward --init`), case and
logits files, model_parity.json (one record per case).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file


def run(cmd):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("model_parity: command failed (rc %d): %s" % (r.returncode, " ".join(cmd)))
    return time.time() - t


def make_cases(vocab, big, g):
    """Case tensors per mask kind (token ids avoid the last id, the tiny preset's mask token)."""
    L = 256 if big else 64
    P, R = (96, 128) if big else (20, 24)
    n = 128 if big else 32
    ids = lambda *shape: torch.randint(0, vocab - 1, shape, generator=g)
    valid = torch.ones(2, P, dtype=torch.bool)
    valid[1, : P // 4] = False  # left padding in the second row
    seg = torch.tensor([[0] * (n // 2 + 3) + [1] * (n // 2 - 3)])
    pos = torch.cat([torch.arange(n // 2 + 3), torch.arange(n // 2 - 3)]).unsqueeze(0)
    return {
        "prefill": {"ids": ids(2, L), "lengths": torch.tensor([L, L - 7])},
        "tracerl": {"ids": ids(2, P + 2 * R), "prompt_valid": valid},
        "sft": {"ids": ids(1, 2 * n), "segment": seg, "positions": pos},
        "decode": {"ids": ids(2, L)},
    }


def load_hf(model_dir, dtype):
    from transformers import Qwen3ForCausalLM
    m = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
    if next(m.parameters()).dtype != dtype:  # transformers 4.x spells it torch_dtype
        m = Qwen3ForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, attn_implementation="sdpa")
    assert next(m.parameters()).dtype == dtype
    return m.to("cuda").eval()


@torch.no_grad()
def hf_logits(model, ids, positions, mask, dtype):
    kwargs = dict(input_ids=ids.cuda(), position_ids=positions.cuda(), use_cache=False)
    if mask is not None:
        m = mask.cuda().bool()
        kwargs["attention_mask"] = torch.zeros(m.shape, dtype=dtype, device="cuda").masked_fill(~m, torch.finfo(dtype).min)
    return model(**kwargs).logits.float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dice", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", default="tiny,sdar-1.7b")
    args = ap.parse_args()
    import transformers
    print("model_parity: torch %s, transformers %s, %s" % (torch.__version__, transformers.__version__,
                                                           torch.cuda.get_device_name(0)))
    records, ok = [], True
    g = torch.Generator().manual_seed(1234)
    for preset in args.presets.split(","):
        big = preset != "tiny"
        model_dir = os.path.join(args.out, "models", preset)
        dt = run([args.dice, "forward", "--model", model_dir, "--init", preset, "--seed", "1"]
                 + (["--shard-bytes", str(2 << 30)] if big else []))
        print("\n== %s: random weights written in %.1f s" % (preset, dt))
        vocab = json.load(open(os.path.join(model_dir, "config.json")))["vocab_size"]
        hf = {torch.float32: load_hf(model_dir, torch.float32), torch.bfloat16: load_hf(model_dir, torch.bfloat16)}
        print("%-8s %-5s %11s %11s %11s %11s  %s" % ("case", "dtype", "dice-vs-HF", "rel", "HF-vs-HF32", "dice-vs-HF32",
                                                       "verdict"))
        for kind, tensors in make_cases(vocab, big, g).items():
            case = os.path.join(args.out, "case_%s_%s.safetensors" % (preset, kind))
            save_file({k: v.contiguous() for k, v in tensors.items()}, case)
            outs = {}
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                out = os.path.join(args.out, "dice_%s_%s_%s.safetensors" % (preset, kind, name))
                secs = run([args.dice, "forward", "--model", model_dir, "--case", case, "--mask", kind, "--out", out,
                            "--device", "cuda", "--dtype", "float32" if dtype == torch.float32 else "bfloat16"])
                outs[name] = (load_file(out), secs)
            d = outs["fp32"][0]
            ref32 = hf_logits(hf[torch.float32], d["ids"], d["positions"], d["mask"], torch.float32)
            scale = ref32.abs().max().item()
            if kind == "prefill":
                # The 4-D mask must change HF's result (block-causal != HF's default causal mask).
                plain = hf_logits(hf[torch.float32], d["ids"], d["positions"], None, torch.float32)
                effect = (plain - ref32).abs().max().item()
                print("   (HF with vs without the block-causal 4-D mask differ by %.3e: %s)"
                      % (effect, "mask honoured" if effect > 1e-3 * scale else "WARNING: mask ignored?"))
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                dl = outs[name][0]["logits"].cuda()
                ref = ref32 if dtype == torch.float32 else hf_logits(hf[dtype], d["ids"], d["positions"], d["mask"], dtype)
                diff = (dl - ref).abs().max().item()
                hf_vs_32 = (ref - ref32).abs().max().item()
                dice_vs_32 = (dl - ref32).abs().max().item()
                if dtype == torch.float32:
                    good = diff <= 1e-3 * max(scale, 1.0)
                else:
                    # bf16: dice's error against the fp32 truth must be of the order of HF's own.
                    good = dice_vs_32 <= 2.0 * hf_vs_32 + 1e-2 * max(scale, 1.0)
                ok &= good
                rec = dict(preset=preset, case=kind, dtype=name, shape=list(dl.shape), max_abs_diff=diff,
                           logit_scale=scale, rel=diff / max(scale, 1e-30), hf_vs_hf32=hf_vs_32,
                           dice_vs_hf32=dice_vs_32, dice_seconds=outs[name][1], ok=good)
                records.append(rec)
                print("%-8s %-5s %11.3e %11.3e %11.3e %11.3e  %s" % (kind, name, diff, rec["rel"], hf_vs_32, dice_vs_32,
                                                                     "ok" if good else "MISMATCH"))
        del hf
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "model_parity.json"), "w") as f:
        json.dump(records, f, indent=1)
    print("\nmodel_parity: %s (details in %s)" % ("PASS" if ok else "FAIL", os.path.join(args.out, "model_parity.json")))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
