#!/usr/bin/env bash
# One GPU-node session phase: runs the named checks against build-gpu/ (built by tools/gpu/build.sh),
# each under a time limit, keeping each check's main log in $OUT (the device tool returns <= 8 files).
#   OUT=... tools/gpu/phase.sh doctor model text sampler judge-cases tasks eval agree judge-bench
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
export DICE=build-gpu/src/app/dice PYTHON=${PYTHON:-python3} DICE_PYTHON=${DICE_PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=/tmp/dice-gpu; mkdir -p "$work"
for phase in "$@"; do
  start=$(date +%s)
  echo "######## $phase"
  case $phase in
    doctor)  # later judge/eval phases get the sandbox override it finds (if any)
      OUT=$work/doctor timeout 240 bash tools/gpu/doctor.sh > "$OUT/doctor.log" 2>&1
      fix=$(cat "$work/doctor/sandbox_fix" 2>/dev/null)
      export JUDGE_SETS="$fix" EVAL_SETS="${EVAL_SETS:-} $(for s in $fix; do printf 'judge.%s ' "$s"; done)"
      echo "JUDGE_SETS=[$JUDGE_SETS] EVAL_SETS=[$EVAL_SETS]" ;;
    model) OUT=$work/model timeout 300 bash tools/gpu/model_parity.sh > "$OUT/model.log" 2>&1 ;;
    text) OUT=$work/text timeout 120 bash tools/gpu/text_examples.sh > "$OUT/text.log" 2>&1 ;;
    sampler) OUT=$work/sampler timeout 420 bash tools/gpu/sampler.sh > "$OUT/sampler.log" 2>&1 ;;
    judge-cases) OUT=$work/judge timeout 230 bash tools/gpu/judge.sh cases > "$OUT/judge_cases.log" 2>&1 ;;
    judge-bench) OUT=$work/judge timeout 420 bash tools/gpu/judge.sh bench > "$OUT/judge_bench.log" 2>&1 ;;
    tasks) OUT=$work/tasks timeout "${TASKS_TIMEOUT:-300}" bash tools/gpu/builtin_tasks.sh > "$OUT/tasks.log" 2>&1 ;;
    eval) timeout "${EVAL_TIMEOUT:-340}" bash tools/gpu/eval.sh "$work/eval" > "$OUT/eval.log" 2>&1 ;;
    agree)  # after tasks and eval: dice's verdicts vs the KernelBench-style harness's
      python3 tools/gpu/compare_verdicts.py "$work/tasks/builtin_cuda_check.json" "$work/eval/solutions_np1/samples.jsonl" \
        > "$OUT/agree.log" 2>&1; cat "$OUT/agree.log" ;;
    *) echo "unknown phase $phase" ;;
  esac
  echo "(exit $?, $(( $(date +%s) - start )) s)"
done
