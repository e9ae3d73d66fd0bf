#!/usr/bin/env python3
"""Training curves for a `dice train` or `dice sft` run directory, as PNG files.

usage: plot_metrics.py RUN_DIR [--out DIR] [--smooth ALPHA]

Reads RUN_DIR/metrics.jsonl (one JSON record per step) and writes, for each group of keys that
the run logged, one PNG into DIR (default RUN_DIR/plots), printing each path it writes:

  reward.png      reward_mean with a +/- reward_std band (reward_min / reward_max dotted)
  eval.png        the evaluation between steps (eval.every): eval_pass_rate, eval_compile_rate,
                  eval_fast_1, at the steps it ran
  clip.png        keys containing "clip" (clip fraction)
  rates.png       keys ending in _rate, _frac or _fraction (pass, compile, zero-variance groups ...)
  loss.png        keys containing "loss", and cross-entropies (ce_*: dice sft's ce_masked)
  kl.png          keys starting with "kl" or containing "_kl"
  grad_norm.png   keys containing "grad_norm"
  throughput.png  keys ending in _per_s or _tok_s, or containing tokens_per_s
  lr.png          lr / learning_rate
  time.png        keys starting with time_, stacked per step in seconds (_ms keys converted);
                  a total (time_step, time_total) is drawn as a line over the stack
  other.png       every other numeric key, one small panel each

Missing keys, non-numeric values, NaN and a last line cut short (a run killed mid-write) are
skipped. When a step occurs more than once, the last record wins (and a note says so). A change
of the `stage` key is marked by a dashed vertical line on every plot.
"""
import argparse
import json
import math
import os
import sys

GROUPS = [  # (file stem, title, y label, predicate on the key); the first match takes a key
    ("eval", "Evaluation of the policy (eval.every)", "fraction of samples",
     lambda k: k.startswith("eval_") and k != "eval_samples"),
    ("clip", "Clipped fraction", "fraction", lambda k: "clip" in k and "grad_norm" not in k),
    ("rates", "Rates", "fraction",
     lambda k: k.endswith(("_rate", "_frac", "_fraction")) and k != "learning_rate"),
    ("loss", "Loss", "loss", lambda k: "loss" in k or k.startswith("ce_")),
    ("kl", "KL divergence", "KL", lambda k: k.startswith("kl") or "_kl" in k),
    ("grad_norm", "Gradient norm", "norm", lambda k: "grad_norm" in k),
    ("throughput", "Throughput", "per second",
     lambda k: k.endswith("_per_s") or k.endswith("_tok_s") or "tokens_per_s" in k),
    ("lr", "Learning rate", "lr", lambda k: k in ("lr", "learning_rate")),
]
REWARD_KEYS = ("reward_mean", "reward_std", "reward_stddev", "reward_min", "reward_max")
TIME_TOTALS = ("time_step", "time_total", "time_iter")  # (unit suffix stripped) a line, not a layer
NOT_PLOTTED = ("step", "stage", "epoch", "policy_version", "timestamp", "time", "wall_time", "elapsed_s")


def number(v):
    """A finite float, or None (bools, strings, NaN and inf do not plot)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def read_records(path):
    by_step, dups, bad = {}, 0, 0
    with open(path) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            if i != len(lines) - 1:
                print(f"plot_metrics: {path}:{i + 1}: not JSON, skipped", file=sys.stderr)
            continue
        if not isinstance(rec, dict):
            bad += 1
            continue
        step = number(rec.get("step"))
        step = int(step) if step is not None else len(by_step) + 1
        if step in by_step:
            dups += 1
        by_step[step] = rec
    if dups:
        print(f"plot_metrics: {dups} step(s) logged more than once; the last record of each is plotted",
              file=sys.stderr)
    return [by_step[s] | {"step": s} for s in sorted(by_step)], bad


def series(records, key):
    xs, ys = [], []
    for r in records:
        v = number(r.get(key))
        if v is not None:
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def ema(ys, alpha):
    out, acc = [], None
    for y in ys:
        acc = y if acc is None else alpha * acc + (1 - alpha) * y
        out.append(acc)
    return out


def stage_starts(records):
    """(step, stage) where the stage key changes (the first stage not included)."""
    out, prev = [], None
    for r in records:
        st = r.get("stage")
        if st is None:
            continue
        if prev is not None and st != prev:
            out.append((r["step"], st))
        prev = st
    return out


class Plotter:
    def __init__(self, plt, records, out_dir, smooth):
        self.plt, self.records, self.out_dir, self.smooth = plt, records, out_dir, smooth
        from matplotlib.ticker import MaxNLocator
        self.integer_ticks = lambda ax: ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        self.stages = stage_starts(records)
        self.written = []

    def mark_stages(self, ax):
        for step, st in self.stages:
            ax.axvline(step, color="0.5", ls="--", lw=0.8)
            ax.text(step, 1.0, f" stage {st}", transform=ax.get_xaxis_transform(), va="top", fontsize=8,
                    color="0.35")

    def line(self, ax, xs, ys, label, **kw):
        if self.smooth > 0 and len(ys) > 2:
            (raw,) = ax.plot(xs, ys, alpha=0.3, lw=0.8, **kw)
            ax.plot(xs, ema(ys, self.smooth), color=raw.get_color(), label=label)
        else:
            ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=label, **kw)

    def save(self, fig, stem):
        path = os.path.join(self.out_dir, stem + ".png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        self.plt.close(fig)
        self.written.append(path)

    def new(self, title, ylabel):
        fig, ax = self.plt.subplots(figsize=(8, 4.5))
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        self.integer_ticks(ax)
        return fig, ax

    def reward(self):
        xs, mean = series(self.records, "reward_mean")
        if not xs:
            return False
        fig, ax = self.new("Reward", "reward")
        std_key = "reward_std" if series(self.records, "reward_std")[0] else "reward_stddev"
        band = [(r["step"], number(r.get("reward_mean")), number(r.get(std_key))) for r in self.records]
        band = [(x, m, s) for x, m, s in band if m is not None and s is not None]
        if band:
            bx = [b[0] for b in band]
            ax.fill_between(bx, [m - s for _, m, s in band], [m + s for _, m, s in band], alpha=0.2,
                            label="± std")
        self.line(ax, xs, mean, "mean")
        for k, style in (("reward_min", ":"), ("reward_max", ":")):
            kx, ky = series(self.records, k)
            if kx:
                ax.plot(kx, ky, ls=style, lw=0.8, color="0.4", label=k.split("_")[1])
        self.mark_stages(ax)
        ax.legend(fontsize=8)
        self.save(fig, "reward")
        return True

    def group(self, stem, title, ylabel, keys):
        fig, ax = self.new(title, ylabel)
        for k in keys:
            xs, ys = series(self.records, k)
            self.line(ax, xs, ys, k)
        if stem == "grad_norm" or stem == "lr":
            ys = [y for k in keys for y in series(self.records, k)[1]]
            if ys and min(ys) > 0 and max(ys) / min(ys) > 100:
                ax.set_yscale("log")
        self.mark_stages(ax)
        ax.legend(fontsize=8)
        self.save(fig, stem)

    def time_phases(self, keys):
        def phase(k):  # "time_judge_ms" -> ("judge", 1e-3): every layer in seconds
            name, scale = k[len("time_"):], 1.0
            if name.endswith("_ms"):
                name, scale = name[:-3], 1e-3
            elif name.endswith("_s"):
                name = name[:-2]
            return name, scale

        def secs(r, k):
            v = number(r.get(k))
            return None if v is None else v * phase(k)[1]

        totals = [k for k in keys if "time_" + phase(k)[0] in TIME_TOTALS]
        layers = [k for k in keys if k not in totals]
        # Largest phase at the bottom; a phase missing at a step counts 0 there.
        layers.sort(key=lambda k: -sum(secs(r, k) or 0.0 for r in self.records))
        rows = [r for r in self.records if any(number(r.get(k)) is not None for k in layers)]
        xs = [r["step"] for r in rows]
        ys = [[secs(r, k) or 0.0 for r in rows] for k in layers]
        labels = [phase(k)[0] for k in layers]
        fig, ax = self.new("Time per step, by phase", "seconds")
        if len(xs) == 1:
            bottom = 0.0
            for label, y in zip(labels, ys):
                ax.bar(xs, y, bottom=bottom, label=label, width=0.6)
                bottom += y[0]
        elif xs:
            ax.stackplot(xs, ys, labels=labels, alpha=0.85)
        stacked = dict(zip(xs, (sum(col) for col in zip(*ys)))) if ys else {}
        over = False
        for k in totals:
            pts = [(r["step"], secs(r, k)) for r in self.records if secs(r, k) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color="k", lw=1.2, label=f"total ({k})")
            over |= any(stacked.get(x, 0.0) > 1.05 * t for x, t in pts)
        if over:
            # Learner and actor phases run at the same time (the learner's wait for rollouts is
            # the actors' sampling), so the layers can add up to more than the step took.
            ax.set_title("Time per step, by phase (phases of different ranks overlap: the stack exceeds the step)",
                         fontsize=10)
        self.mark_stages(ax)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the stack fills the axes
        self.save(fig, "time")

    def others(self, keys):
        n = len(keys)
        cols = min(4, n)
        rows = (n + cols - 1) // cols
        fig, axes = self.plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
        for ax, k in zip(axes.flat, keys):
            xs, ys = series(self.records, k)
            ax.plot(xs, ys, marker="." if len(xs) < 40 else None, lw=1)
            ax.set_title(k, fontsize=9)
            ax.tick_params(labelsize=7)
            self.integer_ticks(ax)
            ax.grid(alpha=0.3)
            for step, _ in self.stages:
                ax.axvline(step, color="0.5", ls="--", lw=0.8)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        self.save(fig, "other")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("run_dir", help="a dice train run directory (holds metrics.jsonl)")
    ap.add_argument("--out", help="where the PNGs go (default RUN_DIR/plots)")
    ap.add_argument("--smooth", type=float, default=0.0, metavar="ALPHA",
                    help="also draw an exponential moving average with this weight (0 <= ALPHA < 1; 0: off)")
    args = ap.parse_args()
    if not 0.0 <= args.smooth < 1.0:
        ap.error("--smooth takes a weight in [0, 1)")
    path = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"plot_metrics: {path} does not exist (is {args.run_dir} a dice train run directory?)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: matplotlib is not installed (Debian: apt-get install python3-matplotlib)")

    records, bad = read_records(path)
    if not records:
        sys.exit(f"plot_metrics: {path} holds no records" + (f" ({bad} unreadable lines)" if bad else ""))
    out_dir = args.out or os.path.join(args.run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)

    numeric = sorted({k for r in records for k, v in r.items() if number(v) is not None} - set(NOT_PLOTTED))
    p = Plotter(plt, records, out_dir, args.smooth)
    taken = set(REWARD_KEYS) if p.reward() else set()
    time_keys = [k for k in numeric if k.startswith("time_")]
    taken |= set(time_keys)
    for stem, title, ylabel, pred in GROUPS:
        keys = [k for k in numeric if k not in taken and pred(k)]
        if keys:
            p.group(stem, title, ylabel, keys)
            taken |= set(keys)
    if time_keys:
        p.time_phases(time_keys)
    rest = [k for k in numeric if k not in taken]
    if rest:
        p.others(rest)
    for w in p.written:
        print(w)
    if not p.written:
        print(f"plot_metrics: no numeric metrics besides the step in {path}", file=sys.stderr)
    print(f"plot_metrics: {len(records)} steps ({records[0]['step']}..{records[-1]['step']}), "
          f"{len(p.written)} plots in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
