#!/usr/bin/env bash
# Judge integrity on the GPU node, in one device call: the CUDA forms of the integrity, mutation
# and hostile cases on the current judge, then `dice bench judge` before / after in the same run.
#
# usage (repo root, on the GPU node):  BEFORE=dir OUT=/path tools/gpu/judge_integrity.sh [cases|agree|bench|all]...
#   BEFORE: a source tree of the judge to compare against (e.g. `git archive <commit>`); optional.
# Steps: builds dice here (and in BEFORE, at the same time), then each phase named:
#   cases  `tools/gpu/judge.sh cases` (honest, mutants, hostile, integrity candidates, CUDA forms);
#   agree  the 34 built-in CUDA solutions: the KernelBench-style harness (tools/gpu/builtin_tasks.sh)
#          and `dice eval --use-solutions` timed (tools/gpu/eval.sh), then their agreement;
#   bench  `dice bench judge` on JUDGE_TASKS built-in CUDA solutions x 2 duplicates: the BEFORE judge
#          and the current one on the same warm cache (agree's, or one the current judge fills cold
#          first), so the two judges' execution cost is compared on the same builds.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_judge_integrity}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
PY=${DICE_PYTHON:-$(command -v python3)}
export DICE_PYTHON=$PY
PHASES=" ${*:-all} "
[[ $PHASES == " all " ]] && PHASES=" cases agree bench "
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

stamp "building"
BUILD_TARGETS=dice bash tools/gpu/build.sh > "$OUT/build_after.log" 2>&1 &
after_pid=$!
if [[ -n ${BEFORE:-} ]]; then
  (cd "$BEFORE" && BUILD_TARGETS=dice bash tools/gpu/build.sh) > "$OUT/build_before.log" 2>&1 &
  before_pid=$!
fi
wait $after_pid || { tail -30 "$OUT/build_after.log"; exit 1; }
[[ -n ${BEFORE:-} ]] && { wait $before_pid || { tail -30 "$OUT/build_before.log"; BEFORE=""; }; }
tail -2 "$OUT/build_after.log"

if [[ $PHASES == *" cases "* ]]; then
  stamp "judge cases (CUDA)"
  OUT=$OUT/cases_run tools/gpu/judge.sh cases > "$OUT/cases.log" 2>&1
  grep -E "^(ok|MISS)|canary" "$OUT/cases_run/judge_cases.txt" | tee "$OUT/judge_cases.txt"
fi

eval_work=/tmp/dice-judge-agree
if [[ $PHASES == *" agree "* ]]; then
  stamp "built-in CUDA solutions: KernelBench-style harness"
  OUT=$OUT/kb bash tools/gpu/builtin_tasks.sh > "$OUT/kb.log" 2>&1
  grep -vE "^(ok|built) " "$OUT/kb/builtin_cuda_check.log" | tail -6
  stamp "built-in CUDA solutions: dice eval --use-solutions, timed"
  rm -rf "$eval_work"
  EVAL_PARTS=solutions bash tools/gpu/eval.sh "$eval_work" > "$OUT/eval.log" 2>&1
  tail -12 "$OUT/eval.log"
  cp "$eval_work/solutions_np1/samples.jsonl" "$OUT/eval_solutions.jsonl"
  cp "$eval_work/solutions_np1.log" "$OUT/eval_solutions.log"
  "$PY" tools/gpu/compare_verdicts.py "$OUT/kb/builtin_cuda_check.json" "$OUT/eval_solutions.jsonl" | tee "$OUT/agree.txt"
fi
[[ $PHASES == *" bench "* ]] || { stamp "done"; exit 0; }

cores=$(nproc); workers=$(( cores / 2 ))
common=(--set device=cuda --set "python=$PY" --set "compile_workers=$workers" --set max_jobs=2)
bench() {  # $1 = label, $2 = dice binary
  stamp "bench judge: $1"
  "$2" bench judge --n-tasks "${JUDGE_TASKS:-12}" --dup 2 --baseline 0 "${common[@]}" --set "cache_root=$cache" \
    --out "$OUT/bench_$1.json" > "$OUT/bench_$1.txt" 2>&1
  grep -E "^(bench judge|judge)" "$OUT/bench_$1.txt"
}
if [[ -d $eval_work/cache ]]; then
  cache=$eval_work/cache
else
  cache=$(mktemp -d /tmp/dice-bench-cache.XXXXXX); chmod 755 "$cache"
  bench after_cold build-gpu/src/app/dice
fi
[[ -n ${BEFORE:-} ]] && bench before_warm "$BEFORE/build-gpu/src/app/dice"
bench after_warm build-gpu/src/app/dice
stamp "done"
