#!/usr/bin/env bash
# Issue 24's checks on the GPU node, most important first, each under its own time limit so that one
# device call (10 minutes at most) gets as far as it can; results and logs land in $OUT.
#   call 1:  OUT=$OUT bash tools/gpu/spine_checks.sh build synth 8b
#   call 2:  OUT=$OUT bash tools/gpu/spine_checks.sh shortcut judge      (same warm machine)
# build     tools/gpu/build.sh (the dice binary only)
# synth     the colocated 1.7B-shaped run on the synthetic reward, 2 steps: the actor samples on the
#           learner's bf16 compute copy; its checksum is checked against the learner's every step
#           (tools/gpu/train.sh PARTS=synth)
# 8b        rank 0 of 8 ZeRO-1 learners of the shipped 8B config, every layer checkpointed, then a
#           colocated sampling phase with the shipped KV cache (32 x 6,144); again with 16 rows when
#           that does not fit. Needs the H200's memory: skipped on a smaller card
# shortcut  the fast builder's compile-error shortcuts keep every verdict (tools/gpu/shortcut_check.sh
#           on the CUDA gap tasks: must print "0 verdicts differ")
# judge     the colocated run on the CUDA judge's reward, 3 steps (tools/gpu/train.sh PARTS=judge)
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
dice=${DICE:-build-gpu/src/app/dice}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
bench8b() {  # ROWS
  timeout 240 "$dice" bench learner --shapes sdar-8b --strategies static --responses 1 --no-peer --zero1-of 8 \
    --checkpoint all --sample-batch "$1" --sample-len 6144 --json "$OUT/bench8b_$1.json" > "$OUT/bench8b_$1.log" 2>&1
  echo "bench 8b, $1 rows: exit $?"
  tail -6 "$OUT/bench8b_$1.log"
  grep -q "colocated sampling" "$OUT/bench8b_$1.log"
}
for step in "$@"; do
  echo "#### $step ($(date +%T))"
  case $step in
    build) OUT=$OUT BUILD_TARGETS=dice bash tools/gpu/build.sh 2>&1 | tail -3 ;;
    synth) OUT=$OUT PARTS=synth timeout 220 bash tools/gpu/train.sh 2>&1 | tail -14 ;;
    8b)
      if (( ${mem_mib:-0} < 120000 )); then
        echo "skipped: ${mem_mib:-?} MiB on this card (the 8B rank needs an H200: needs_h200)"
      else
        bench8b 32 || bench8b 16
      fi ;;
    shortcut) OUT=$OUT timeout 240 bash tools/gpu/shortcut_check.sh configs/tasks/builtin_cuda_gaps.jsonl cuda 2>&1 | tail -6 ;;
    judge) OUT=$OUT PARTS=judge timeout 320 bash tools/gpu/train.sh 2>&1 | tail -16 ;;
    *) echo "unknown step $step (build synth 8b shortcut judge)"; exit 2 ;;
  esac
done
echo "#### done ($(date +%T))"
