#!/usr/bin/env python3
"""Summarises an `ncu --csv --metrics gpu__time_duration.sum` log: kernels grouped by name, with
count, total and mean GPU time, largest total first.

usage: ncu_summary.py NCU_CSV [TOP]
"""
import csv
import sys
from collections import defaultdict


def main() -> int:
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not CSV rows
    rows = list(csv.DictReader(lines))
    if not rows:
        print(f"ncu_summary: no kernel rows in {path}")
        return 1
    total_ns = 0.0
    by_name = defaultdict(lambda: [0, 0.0])
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        ns = value * {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1.0)
        name = r.get("Kernel Name", "?")
        by_name[name][0] += 1
        by_name[name][1] += ns
        total_ns += ns
    n = sum(c for c, _ in by_name.values())
    print(f"{n} kernels, {total_ns / 1e6:.3f} ms of GPU time, {total_ns / max(n, 1) / 1e3:.2f} us per kernel on average")
    print(f"{'count':>7} {'total ms':>9} {'share':>6} {'mean us':>8}  kernel")
    for name, (count, ns) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{count:7d} {ns / 1e6:9.3f} {100 * ns / total_ns:5.1f}% {ns / count / 1e3:8.2f}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
