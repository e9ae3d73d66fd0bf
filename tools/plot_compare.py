#!/usr/bin/env python3
"""The plot of `dice eval report --compare`: two or more `dice eval` results side by side.

usage: plot_compare.py OUT_DIR EVAL_DIR [EVAL_DIR ...]
Reads each EVAL_DIR/samples.jsonl (fields: task_id, verdict.correct, verdict.failure) and writes
OUT_DIR/compare.png: the pass rate of every task, one bar per result (left), and what became of the
samples of each result: correct or its failure class (right). A result is named by its folder.
"""
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(eval_dir):
    rows = []
    with open(os.path.join(eval_dir, "samples.jsonl")) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def outcome(row):
    v = row.get("verdict", {})
    return "correct" if v.get("correct") else (v.get("failure") or "failed")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out_dir, dirs = sys.argv[1], sys.argv[2:]
    runs = [(os.path.basename(os.path.normpath(d)), load(d)) for d in dirs]
    tasks = sorted({r["task_id"] for _, rows in runs for r in rows})
    classes = ["correct"] + sorted({outcome(r) for _, rows in runs for r in rows} - {"correct"})

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(runs)
    for k, (name, rows) in enumerate(runs):
        per_task = collections.defaultdict(list)
        for r in rows:
            per_task[r["task_id"]].append(bool(r.get("verdict", {}).get("correct")))
        rates = [100.0 * sum(per_task[t]) / len(per_task[t]) if per_task[t] else 0.0 for t in tasks]
        total = 100.0 * sum(bool(r.get("verdict", {}).get("correct")) for r in rows) / max(len(rows), 1)
        ax.bar([i + k * width for i in range(len(tasks))], rates, width, label="%s (%.1f %%)" % (name, total))
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))])
    ax.set_xticklabels([t.replace("builtin_", "") for t in tasks], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("pass rate per task (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    ax.set_title("pass rate per task")

    bottoms = [0.0] * len(runs)
    for c in classes:
        share = [100.0 * sum(outcome(r) == c for r in rows) / max(len(rows), 1) for _, rows in runs]
        bx.bar(range(len(runs)), share, 0.6, bottom=bottoms, label=c)
        bottoms = [b + s for b, s in zip(bottoms, share)]
    bx.set_xticks(range(len(runs)))
    bx.set_xticklabels([n for n, _ in runs], rotation=20, ha="right", fontsize=8)
    bx.set_ylabel("samples (%)")
    bx.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    bx.set_title("outcome of the samples")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "compare.png"), dpi=110)


if __name__ == "__main__":
    main()
