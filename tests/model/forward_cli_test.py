#!/usr/bin/env python3
"""`dice forward` end to end on CPU: random tiny weights (sharded), every mask kind, logits
checked against the independent reference in qwen3_reference.py; a bad case gets exit 2.

usage: forward_cli_test.py DICE_BINARY WORK_DIR
"""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_reference as ref  # noqa: E402


def main():
    dice, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny")
    subprocess.run([dice, "forward", "--model", model, "--init", "tiny", "--seed", "5", "--shard-bytes", "100000"],
                   check=True)
    assert os.path.exists(os.path.join(model, "model.safetensors.index.json")), "expected a sharded model"
    g = torch.Generator().manual_seed(0)
    vocab = 511
    valid = torch.ones(2, 6, dtype=torch.bool)
    valid[1, :3] = False
    cases = {
        "full": {"ids": torch.randint(0, vocab, (2, 9), generator=g)},
        "prefill": {"ids": torch.randint(0, vocab, (2, 13), generator=g), "lengths": torch.tensor([13, 9])},
        "tracerl": {"ids": torch.randint(0, vocab, (2, 6 + 16), generator=g), "prompt_valid": valid},
        "decode": {"ids": torch.randint(0, vocab, (2, 12), generator=g)},
        "sft": {"ids": torch.randint(0, vocab, (1, 20), generator=g), "segment": torch.tensor([[0] * 6 + [1] * 4]),
                "positions": torch.tensor([list(range(6)) + list(range(4))])},
    }
    failed = []
    for kind, tensors in cases.items():
        case = os.path.join(work, "case_%s.safetensors" % kind)
        out = os.path.join(work, "out_%s.safetensors" % kind)
        ref.write_safetensors(case, tensors)
        subprocess.run([dice, "forward", "--model", model, "--case", case, "--mask", kind, "--out", out,
                        "--device", "cpu"], check=True)
        if not ref.compare(model, out, 1e-4):
            failed.append(kind)
    bad = subprocess.run([dice, "forward", "--model", model, "--case", os.path.join(work, "case_sft.safetensors"),
                          "--mask", "tracerl", "--out", os.path.join(work, "x.safetensors")],
                         capture_output=True, text=True)
    if bad.returncode != 2 or "prompt_valid" not in bad.stderr:
        failed.append("error message (rc %d: %s)" % (bad.returncode, bad.stderr.strip()))
    print("forward_cli_test: %s" % ("FAILED: " + ", ".join(failed) if failed else "all mask kinds match the reference"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
