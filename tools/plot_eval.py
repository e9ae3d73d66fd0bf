#!/usr/bin/env python3
"""Plots for a `dice eval` result folder: speedup distribution per level and failure classes.

usage: plot_eval.py SAMPLES_JSONL OUT_DIR
Reads the per-sample records written by `dice eval` (fields: level, verdict.correct,
verdict.speedup, verdict.failure) and writes speedup.png and failures.png into OUT_DIR.
"""
import collections
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    samples_path, out_dir = sys.argv[1], sys.argv[2]
    records = []
    with open(samples_path) as f:
        for line in f:
            line = line.strip()
            if line:
                records.append(json.loads(line))

    levels = sorted({r.get("level", 0) for r in records})
    fig, ax = plt.subplots(figsize=(7, 4))
    plotted = False
    for lv in levels:
        sp = [r["verdict"]["speedup"] for r in records
              if r.get("level", 0) == lv and r["verdict"].get("correct") and r["verdict"].get("speedup", -1) > 0]
        if sp:
            ax.hist([math.log2(s) for s in sp], bins=20, alpha=0.6, label=f"level {lv} (n={len(sp)})")
            plotted = True
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_xlabel("log2(speedup over PyTorch), correct samples")
    ax.set_ylabel("samples")
    ax.set_title("Speedup distribution per level")
    if plotted:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no correct, timed samples", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(f"{out_dir}/speedup.png", dpi=100)

    counts = collections.Counter(r["verdict"].get("failure", "none") for r in records)
    names = sorted(counts, key=lambda k: -counts[k])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.barh(names, [counts[n] for n in names], color="tab:red")
    ax.invert_yaxis()
    ax.set_xlabel("samples")
    ax.set_title("Failure classes (none = correct)")
    fig.tight_layout()
    fig.savefig(f"{out_dir}/failures.png", dpi=100)


if __name__ == "__main__":
    main()
