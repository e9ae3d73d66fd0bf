#!/usr/bin/env bash
# launch/learn_gaps.sh on the GPU node (after tools/gpu/build.sh): the tiny model's SFT, sampling and
# RL updates on the GPU (one rank, colocated), the CPU gap tasks judged on the node's cores.
# A rerun resumes each step (the run directory stays while the machine is warm). Copies the
# metrics, reports and logs to $OUT. LIMIT_S bounds the pipeline (default 480 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
run=${DICE_RUN_DIR:-runs/learn_gaps_gpu}
DICE_BIN=${DICE:-build-gpu/src/app/dice} DICE_RUN_DIR=$run DICE_SFT_NP=1 DICE_NP=1 \
  DICE_SFT_SET=${DICE_SFT_SET:-epochs=200} DICE_RL_SET="dist.colocated=true ${DICE_RL_SET:-}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} \
  timeout "${LIMIT_S:-480}" bash launch/learn_gaps.sh > "$OUT/learn_gaps.log" 2>&1
echo "learn_gaps: exit $?"
grep -v "judged \|sampled " "$OUT/learn_gaps.log" | grep -v "^step " | tail -40
grep "^step " "$OUT/learn_gaps.log" | awk 'NR % 50 == 1' | tail -20
grep "^step " "$OUT/learn_gaps.log" | tail -3
for d in sft rl eval_before eval_after compare; do
  mkdir -p "$OUT/$d"
  cp "$run/$d"/{metrics.jsonl,report.md,report.json,compare.md,log.txt,samples.jsonl} "$OUT/$d/" 2>/dev/null
  cp -r "$run/$d/plots" "$OUT/$d/" 2>/dev/null
done
ls "$run" 2>/dev/null
