#!/usr/bin/env bash
# Do the fast builder's shortcuts keep every verdict? (docs/judge.md: a device part whose error is a word
# nothing declares is a compile error without the plain build; so is a main.cpp error on the light
# header.) Judges the responses of a learn_gaps run's evals again, once with the fast builder and once
# with load_inline's plain build only (judge.fast_build=false), each into a fresh build cache with no
# verdict reused, and compares the two verdicts of every sample (correct, failure class). Exit status 1
# when any differs.
#   usage (GPU node, after tools/gpu/learn_gaps.sh with DICE_LEARN=gaps_cuda):
#     OUT=$OUT bash tools/gpu/shortcut_check.sh runs/learn_gaps_cuda_gpu
# Or, with no run at hand, on a gap task set: its solutions, twins and the compile errors of
# tools/gap_candidates.py (a stray token, a stray "(", an undeclared word, a glued ".5f"), judged by
# `dice judge` both ways:
#     OUT=$OUT bash tools/gpu/shortcut_check.sh configs/tasks/builtin_cuda_gaps.jsonl [cuda]
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: shortcut_check.sh RUN_DIR | TASKS.jsonl [device]}
dice=${DICE:-build-gpu/src/app/dice}
export DICE_PCH_ROOT=${DICE_PCH_ROOT:-$PWD/runs/judge_pch}
compare() {  # FAST.jsonl PLAIN.jsonl LABEL: records with task_id, sample_id and the verdict (or its fields)
  python3 - "$@" <<'PY'
import json, sys
def verdicts(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        v = r.get("verdict", r)
        out[(r["task_id"], str(r["sample_id"]))] = (bool(v["correct"]), v.get("failure", ""))
    return out
fast, plain = verdicts(sys.argv[1]), verdicts(sys.argv[2])
differ = [k for k in sorted(set(fast) | set(plain)) if fast.get(k) != plain.get(k)]
for k in differ:
    print("DIFFER %s/%s: fast %s, plain %s" % (k[0], k[1], fast.get(k), plain.get(k)))
fails = sum(1 for v in plain.values() if v[1] == "compile_error")
print("shortcut_check: %s: %d samples, %d compile errors in the plain build, %d verdicts differ"
      % (sys.argv[3], len(plain), fails, len(differ)))
sys.exit(1 if differ or not plain else 0)
PY
}
if [[ $run == *.jsonl ]]; then
  work=${DICE_CHECK_DIR:-runs/shortcut_check}
  rm -rf "$work" && mkdir -p "$work"
  python3 tools/gap_candidates.py "$run" solution,twin,syntax_error,unbalanced,undefined,literal > "$work/candidates.jsonl"
  for mode in fast plain; do
    fast=true; [[ $mode == plain ]] && fast=false
    t0=$(date +%s)
    "$dice" judge --tasks "$run" --candidates "$work/candidates.jsonl" --out "$work/$mode.jsonl" --set "device=${2:-cuda}" \
      --set fast_build=$fast --set reuse_verdicts=off --set "cache_root=$work/cache.$mode" > "$work/$mode.log" 2>&1 ||
      { echo "shortcut_check: dice judge ($mode) failed"; tail -5 "$work/$mode.log"; }
    echo "shortcut_check: $mode: $(( $(date +%s) - t0 )) s, $(grep -c "to the plain build" "$work/$mode.log") hand-overs"
  done
  cp "$work/"*.log "${OUT:-/tmp}/" 2>/dev/null
  compare "$work/fast.jsonl" "$work/plain.jsonl" "$(basename "$run")"
  exit
fi
learn=${DICE_LEARN:-gaps_cuda}  # whose eval configs judge them (gaps: the CPU gap tasks, to try the script)
mkdir -p "$run/check"
rc=0
for pair in eval_before:eval eval_before_e2e:eval_e2e eval_after:eval eval_after_e2e:eval_e2e; do
  name=${pair%%:*} cfg=configs/learn/${learn}_${pair#*:}.yaml
  [[ -s $run/$name/samples.jsonl ]] || continue
  samples=$(python3 -c 'import json, sys; print(1 + max(json.loads(l)["sample_id"] for l in open(sys.argv[1])))' \
    "$run/$name/samples.jsonl")
  extra=(); for kv in ${DICE_CHECK_SET:-}; do extra+=(--set "$kv"); done  # e.g. tasks=FILE (a subset)
  for mode in fast plain; do
    fast=true; [[ $mode == plain ]] && fast=false
    rm -rf "$run/check/$name.$mode" "$run/check/cache.$name.$mode"
    t0=$(date +%s)
    "$dice" eval -c "$cfg" --responses "$run/$name/samples.jsonl" --out "$run/check/$name.$mode" \
      --samples "$samples" --set "pass_k=[1]" "${extra[@]}" \
      --set judge.fast_build=$fast --set judge.reuse_verdicts=off --set "judge.cache_root=$run/check/cache.$name.$mode" \
      > "$run/check/$name.$mode.log" 2>&1 || { echo "shortcut_check: $name $mode: dice eval failed"; tail -5 "$run/check/$name.$mode.log"; rc=1; }
    echo "shortcut_check: $name $mode: $(( $(date +%s) - t0 )) s, $(grep -c "to the plain build" "$run/check/$name.$mode.log") hand-overs"
  done
  compare "$run/check/$name.fast/samples.jsonl" "$run/check/$name.plain/samples.jsonl" "$name" || rc=1
done
cp -r "$run/check/"*.log "${OUT:-/tmp}/" 2>/dev/null
exit $rc
