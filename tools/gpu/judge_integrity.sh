#!/usr/bin/env bash
# Judge integrity on the GPU node, in one device call: the CUDA forms of the integrity, mutation
# and hostile cases on the current judge, then `dice bench judge` before / after in the same run.
#
# usage (repo root, on the GPU node):  BEFORE=dir OUT=/path tools/gpu/judge_integrity.sh [cases|bench|all]
#   BEFORE: a source tree of the judge to compare against (e.g. `git archive <commit>`); optional.
# Steps: builds dice here (and in BEFORE, at the same time); `tools/gpu/judge.sh cases`; then the
# bench on JUDGE_TASKS built-in CUDA solutions x 2 duplicates: the current judge with a cold cache
# (every candidate built), then the BEFORE judge and the current judge again on that warm cache, so
# the two judges' execution cost is compared on the same builds.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_judge_integrity}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
PY=${DICE_PYTHON:-$(command -v python3)}
export DICE_PYTHON=$PY
PHASE=${1:-all}
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

if [[ $PHASE == cases || $PHASE == all ]]; then
  stamp "judge cases (CUDA)"
  OUT=$OUT/cases_run tools/gpu/judge.sh cases > "$OUT/cases.log" 2>&1
  grep -E "^(ok|MISS)|canary" "$OUT/cases_run/judge_cases.txt" | tee "$OUT/judge_cases.txt"
fi
[[ $PHASE == cases ]] && { stamp "done"; exit 0; }

cores=$(nproc); workers=$(( cores / 2 ))
common=(--set device=cuda --set "python=$PY" --set "compile_workers=$workers" --set max_jobs=2)
cache=$(mktemp -d /tmp/dice-bench-cache.XXXXXX); chmod 755 "$cache"
bench() {  # $1 = label, $2 = dice binary
  stamp "bench judge: $1"
  "$2" bench judge --n-tasks "${JUDGE_TASKS:-12}" --dup 2 --baseline 0 "${common[@]}" --set "cache_root=$cache" \
    --out "$OUT/bench_$1.json" > "$OUT/bench_$1.txt" 2>&1
  grep -E "^(bench judge|judge)" "$OUT/bench_$1.txt"
}
bench after_cold build-gpu/src/app/dice
[[ -n ${BEFORE:-} ]] && bench before_warm "$BEFORE/build-gpu/src/app/dice"
bench after_warm build-gpu/src/app/dice
stamp "done"
