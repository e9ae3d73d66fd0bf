#!/usr/bin/env bash
# Judge throughput on the GPU node (issue 21): `dice bench judge` on the built-in CUDA solutions plus
# distinct variants the bench makes (cold build cache, then warm), with the judge's default settings.
# BEFORE=DIR (a source tree of the commit to compare, e.g. `git archive 9300025`) also builds that
# commit and judges the same candidates with its `dice judge`, cold, in the same run.
#
# usage (repo root):  OUT=/path [VARIANTS=1] [BEFORE=dir] [SETS="k=v ..."] tools/gpu/judge_throughput.sh
# Results: $OUT/bench.txt, $OUT/bench.json, $OUT/before.txt, $OUT/build*.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_judge_throughput}
mkdir -p "$OUT"
PY=$(command -v python3)
export DICE_PYTHON=$PY
sets=(--set device=cuda --set "python=$PY")
for s in ${SETS:-}; do sets+=(--set "$s"); done
start=$(date +%s)
if [[ -n ${BEFORE:-} ]]; then  # both builds at once: 16 cores
  (cd "$BEFORE" && BUILD_TARGETS=dice bash tools/gpu/build.sh > "$OUT/build_before.txt" 2>&1) &
  bpid=$!
fi
BUILD_TARGETS=dice bash tools/gpu/build.sh > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
[[ -n ${BEFORE:-} ]] && { wait $bpid || { tail -40 "$OUT/build_before.txt"; exit 1; }; }
echo "builds: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
cache=$(mktemp -d /tmp/dice-throughput-cache.XXXXXX); chmod 755 "$cache"
build-gpu/src/app/dice bench judge --variants "${VARIANTS:-1}" "${sets[@]}" --set "cache_root=$cache" \
  --write-candidates "$OUT/candidates.jsonl" --out "$OUT/bench.json" 2>&1 | grep -v "^\[" | tee "$OUT/bench.txt"
rc=${PIPESTATUS[0]}
if [[ -n ${BEFORE:-} ]]; then
  echo "== before: $BEFORE's dice judge on the same candidates, cold cache"
  bcache=$(mktemp -d /tmp/dice-throughput-before.XXXXXX); chmod 755 "$bcache"
  t0=$(date +%s.%N)
  (cd "$BEFORE" && build-gpu/src/app/dice judge --tasks configs/tasks/builtin_cuda.jsonl --candidates "$OUT/candidates.jsonl" \
    --out "$OUT/verdicts_before.jsonl" "${sets[@]}" --set "cache_root=$bcache" --set timing=true \
    ${BEFORE_SETS:-} 2>&1 | grep -v "^\[" | tail -8) | tee "$OUT/before.txt"
  echo "before: wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/before.txt"
fi
exit $rc
