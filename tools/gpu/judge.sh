#!/usr/bin/env bash
# Kernel judge on the GPU node: CUDA versions of the honest / mutation / hostile checks, then
# `dice bench judge` (32 CUDA candidates = 16 built-in tasks' solutions x 2 duplicates, as RL groups
# produce) against a KernelBench-style one-by-one evaluation on the same candidates.
#
# usage (repo root, project built in build-gpu/):  OUT=/path tools/gpu/judge.sh [cases|bench|all]
#   cases  ~5 min: 15 checked candidates (honest, duplicates, 11 mutants) + 11 hostile ones
#          + 17 integrity candidates (tests/judge/candidates/int_*.py with their CUDA extension)
#   bench  ~5 min: judge on 32 candidates (cold cache, precompiled header made first) + the
#          one-by-one baseline on JUDGE_BASELINE of them (default 2: each costs a full ~50 s build)
#          + agreement of verdicts
#   JUDGE_SETS="k=v ..." adds --set overrides to every judge run.
#   JUDGE_VARIANTS=1 adds one cold build per compile variant (extension.h vs light headers, MAX_JOBS).
# Results: $OUT/judge_cases.txt, $OUT/bench_judge.txt, $OUT/bench_judge.json, verdict JSONL files.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_judge_gpu}
DICE=${DICE:-build-gpu/src/app/dice}
PY=${DICE_PYTHON:-$(command -v python3)}
export DICE_PYTHON=$PY
PHASE=${1:-all}
mkdir -p "$OUT"
[ -x "$DICE" ] || { echo "judge.sh: $DICE not found; build with: cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
cores=$(nproc); workers=$(( cores / 2 )); (( workers < 1 )) && workers=1
common=(--set device=cuda --set "python=$PY" --set "compile_workers=$workers" --set max_jobs=2)
# JUDGE_SETS: extra overrides, e.g. the sandbox setting `dice doctor` recommends on this node.
for s in ${JUDGE_SETS:-}; do common+=(--set "$s"); done
# The build cache stays outside $OUT: the device tool brings back only a limited number of files.
cache=${JUDGE_CACHE:-/tmp/dice-judge-cases-cache}
mkdir -p "$cache" && chmod 755 "$cache"
# executors for the checked and hostile runs (the integrity run always has one: the poisoner's slot)
ex=${CASES_EXECUTORS:-1}
rc=0

if [[ $PHASE == cases || $PHASE == all ]]; then
  echo "== judge cases (CUDA): honest, mutants, hostile"
  $PY tools/gpu/judge_cases.py write "$OUT/cases"
  "$DICE" judge --tasks "$OUT/cases/tasks.jsonl" --candidates "$OUT/cases/candidates_checked.jsonl" \
    --out "$OUT/verdicts_checked.jsonl" "${common[@]}" --set "cache_root=$cache" --set timing=true --set executors=$ex \
    --set exec_timeout_s=120 > "$OUT/judge_checked.log" 2>&1; tail -30 "$OUT/judge_checked.log"
  "$DICE" judge --tasks "$OUT/cases/tasks.jsonl" --candidates "$OUT/cases/candidates_hostile.jsonl" \
    --out "$OUT/verdicts_hostile.jsonl" "${common[@]}" --set "cache_root=$cache" --set static_check=off --set executors=$ex \
    --set exec_timeout_s=20 > "$OUT/judge_hostile.log" 2>&1; tail -30 "$OUT/judge_hostile.log"
  # integrity suite: one executor, so every candidate follows the poisoner in the same slot
  "$DICE" judge --tasks "$OUT/cases/tasks.jsonl" --candidates "$OUT/cases/candidates_integrity.jsonl" \
    --out "$OUT/verdicts_integrity.jsonl" "${common[@]}" --set "cache_root=$cache" --set static_check=off \
    --set timing=true --set executors=1 --set exec_timeout_s=120 > "$OUT/judge_integrity.log" 2>&1; tail -30 "$OUT/judge_integrity.log"
  $PY tools/gpu/judge_cases.py check "$OUT/cases" "$OUT/verdicts_checked.jsonl" "$OUT/verdicts_hostile.jsonl" \
    "$OUT/verdicts_integrity.jsonl" \
    | tee "$OUT/judge_cases.txt"
  rc=$(( rc | ${PIPESTATUS[0]} ))
fi

if [[ $PHASE == bench || $PHASE == all ]]; then
  echo "== dice bench judge"
  extra=()
  [[ ${JUDGE_VARIANTS:-0} == 1 ]] && extra+=(--build-variants)
  # a fresh cache: every candidate builds cold; the precompiled header is made once before timing
  bcache=$(mktemp -d /tmp/dice-bench-judge-cache.XXXXXX); chmod 755 "$bcache"
  "$DICE" bench judge --timing --variants 0 --n-tasks "${JUDGE_TASKS:-16}" --dup "${JUDGE_DUP:-2}" --baseline "${JUDGE_BASELINE:-2}" \
    "${common[@]}" --set "cache_root=$bcache" --out "$OUT/bench_judge.json" "${extra[@]}" 2>&1 | tee "$OUT/bench_judge.txt"
  rc=$(( rc | ${PIPESTATUS[0]} ))
fi
exit $rc
