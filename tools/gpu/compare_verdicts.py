#!/usr/bin/env python3
"""Do dice's verdicts on the built-in honest CUDA solutions equal the KernelBench-style harness's?

usage: compare_verdicts.py KB_CHECK.json DICE_SAMPLES.jsonl
  KB_CHECK.json       tools/tasks/check_builtin.py --json (reference-first load_inline harness)
  DICE_SAMPLES.jsonl  dice eval --use-solutions samples (one verdict per task)
Prints one line per task where they differ, then the agreement and both speedup geomeans.
Exit status 1 when any correctness verdict differs.
"""
import json
import math
import sys


def main():
    kb = {r["id"]: r for r in json.load(open(sys.argv[1]))}
    dice = {}
    for line in open(sys.argv[2]):
        if line.strip():
            r = json.loads(line)
            dice[r["task_id"]] = r["verdict"]
    common = sorted(set(kb) & set(dice))
    differ = 0
    kb_sp, dice_sp = [], []
    for tid in common:
        a, b = bool(kb[tid]["ok"]), bool(dice[tid]["correct"])
        if a != b:
            differ += 1
            print(f"DIFFER {tid}: kernelbench-style {'correct' if a else 'incorrect'}, dice {dice[tid]['failure']}"
                  f" {dice[tid].get('log_tail', '')[-200:]!r}")
        if a and b and kb[tid].get("speedup") and dice[tid].get("speedup", 0) > 0:
            kb_sp.append(kb[tid]["speedup"])
            dice_sp.append(dice[tid]["speedup"])
    gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")  # noqa: E731
    print(f"verdict agreement: {len(common) - differ}/{len(common)} tasks "
          f"(kernelbench-style correct {sum(bool(kb[t]['ok']) for t in common)}, "
          f"dice correct {sum(bool(dice[t]['correct']) for t in common)}); "
          f"only in one: {len(set(kb) ^ set(dice))}")
    if kb_sp:
        print(f"speedup geomean over {len(kb_sp)} tasks both timed: kernelbench-style {gm(kb_sp):.3f}, dice {gm(dice_sp):.3f}")
    return 1 if differ or len(set(kb) ^ set(dice)) else 0


if __name__ == "__main__":
    sys.exit(main())
