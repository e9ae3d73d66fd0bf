#!/usr/bin/env bash
# Issue 22's learning check across seeds: the quickstart's RL stage (configs/learn/quick_rl.yaml, the
# kernel judge's exec reward) again from the quickstart test's SFT checkpoint with sampler seeds 2 and
# 3, each evaluated as the quickstart evaluates (configs/learn/quick_eval.yaml, the same judge cache).
# Seed 1 is the quickstart test's own run. Prints the three before/after pass rates and ratios and
# asserts that every seed's pass rate rose by at least MARGIN (default 0.15) and that the mean ratio
# is at least 1.5. The in-training eval is left out here (the quickstart test checks it).
#
#   quickstart_seeds_test.sh SOURCE_DIR   (DICE_BUILD_DIR, and DICE_RUN_DIR: the quickstart test's run)
set -euo pipefail
src=$(cd "${1:?usage: quickstart_seeds_test.sh SOURCE_DIR}" && pwd)
run=${DICE_RUN_DIR:?}
dice=${DICE_BUILD_DIR:?}/src/app/dice
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
for d in eval_before eval_after; do
  [[ -s $run/$d/samples.jsonl ]] || fail "no $run/$d/samples.jsonl: the quickstart test did not complete"
done
sft=$(ls -d "$run"/sft/step_* 2>/dev/null | sort | tail -1)
[[ -n $sft ]] || fail "no SFT checkpoint in $run/sft"
cd "$src"
cache=(--set "judge.cache_root=$run/judge_cache")
for seed in 2 3; do
  out=$run/seed$seed
  rm -rf "$out"
  mpirun -np 1 --bind-to none --oversubscribe "$dice" train -c configs/learn/quick_rl.yaml "${cache[@]}" \
    --set dist.colocated=true --set sampler.seed=$seed --set eval.every=0 --model "$sft" --out "$out/rl" \
    > "$out.train.log" 2>&1 || { tail -30 "$out.train.log"; fail "dice train, seed $seed"; }
  grep "^step " "$out.train.log" | sed "s/^/seed $seed: /" | cut -c1-140
  "$dice" eval -c configs/learn/quick_eval.yaml "${cache[@]}" --checkpoint "$out/rl" --out "$out/eval_after" \
    > "$out.eval.log" 2>&1 || { tail -30 "$out.eval.log"; fail "dice eval, seed $seed"; }
done
"${DICE_PYTHON:-python3}" - "$run" "${MARGIN:-0.15}" <<'PY'
import json, sys
run, margin = sys.argv[1], float(sys.argv[2])
def rate(d):
    rows = [json.loads(l) for l in open("%s/%s/samples.jsonl" % (run, d))]
    assert len(rows) == 48, (d, len(rows))
    return sum(bool(r["verdict"]["correct"]) for r in rows) / len(rows)
before = rate("eval_before")
after = {1: rate("eval_after"), 2: rate("seed2/eval_after"), 3: rate("seed3/eval_after")}
ratios = {s: a / before for s, a in after.items()}
for s in sorted(after):
    print("seed %d: pass rate %.3f -> %.3f (x%.2f, %+.3f)" % (s, before, after[s], ratios[s], after[s] - before))
mean = sum(ratios.values()) / len(ratios)
print("ratios after/before: %s; mean x%.2f" % (" ".join("%.2f" % ratios[s] for s in sorted(ratios)), mean))
low = [s for s in after if after[s] < before + margin]
assert not low, "seeds %s rose by less than %.2f" % (low, margin)
assert mean >= 1.5, "mean ratio %.2f < 1.5" % mean
PY
echo "PASS: quickstart_seeds"
