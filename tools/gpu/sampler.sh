#!/usr/bin/env bash
# Sampler check + benchmark on the GPU node (about 4-5 minutes). Run at the repo root after
#   cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu
# Writes $OUT/sampler_greedy.txt, $OUT/sampler_bench.txt and $OUT/sampler_bench.json.
#  1. greedy equality at the SDAR-1.7B shape: dice (one batch of 4 prompts of lengths 37..130,
#     fp32, static, block 4 / 4 steps) vs tools/gpu/sampler_peer.py (HF transformers Qwen3 with
#     4-D masks, one prompt at a time) on the same random weights: tokens and step maps equal.
#  2. tokens/s at SDAR-1.7B and SDAR-4B shapes, batch 1 / 32 / 128, prompt 512, static and
#     dynamic 0.9, beside the peer (static) and the roofline (4.8 TB/s, 790 TFLOP/s).
# Override lengths with SAMPLER_NEW (dice new tokens, default 256), SAMPLER_PEER_NEW (peer, 64),
# SAMPLER_GREEDY_NEW (64); SAMPLER_SHAPES / _BATCHES / _STRATEGIES narrow the grid; SAMPLER_GRAPHS
# (off | on | both, default both) adds rows with sampler.cuda_graphs; SAMPLER_FUSED (off | on | both,
# default on) the same for sampler.fused (the greedy check then also compares the fused kernels'
# bf16 logits with the plain path); PYTHON picks the interpreter with torch + transformers.
# SAMPLER_LONG_NEW (e.g. 4096) adds a batch-128 static row of that many new tokens per shape in
# SAMPLER_LONG_SHAPES (default sdar-1.7b), without the peer: about 3 minutes for 1.7B.
#  3. operators per decode step (`dice bench sample --op-profile`), written to $OUT/sampler_ops.txt.
#  4. with SAMPLER_NCU=1: ncu's GPU time per kernel over about one eager step (NCU_SKIP launches
#     skipped, NCU_COUNT timed), summarised by tools/gpu/ncu_summary.py into $OUT/sampler_ncu.txt.
set -uo pipefail
OUT=${OUT:-/tmp/dice-sampler-out}
mkdir -p "$OUT"
DICE=${DICE:-build-gpu/dice}
PY=${PYTHON:-python3}
NEW=${SAMPLER_NEW:-256}
PEER_NEW=${SAMPLER_PEER_NEW:-64}
GREEDY_NEW=${SAMPLER_GREEDY_NEW:-64}
FUSED=${SAMPLER_FUSED:-on}  # off | on | both: rows (and greedy / op counts) with sampler.fused
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  || echo "WARNING: transformers missing: the peer falls back to its own PyTorch Qwen3"

echo "== 1. greedy equality (sdar-1.7b shape) =="
start=$(date +%s)
"$DICE" bench sample --greedy-check --shapes sdar-1.7b --max-new-tokens "$GREEDY_NEW" --python "$PY" --fused "$FUSED" \
  --work-dir /tmp/dice-bench-sample 2>&1 | tee "$OUT/sampler_greedy.txt"
greedy_rc=${PIPESTATUS[0]}
rm -rf /tmp/dice-bench-sample
echo "(greedy check: exit $greedy_rc, $(( $(date +%s) - start )) s)"

echo "== 2. throughput =="
start=$(date +%s)
"$DICE" bench sample --shapes "${SAMPLER_SHAPES:-sdar-1.7b,sdar-4b}" --batches "${SAMPLER_BATCHES:-1,32,128}" \
  --strategies "${SAMPLER_STRATEGIES:-static,dynamic}" --graphs "${SAMPLER_GRAPHS:-both}" --fused "$FUSED" \
  --prompt-len 512 --max-new-tokens "$NEW" --peer-max-new "$PEER_NEW" --python "$PY" \
  --phase-new "${PHASE_NEW:-128}" --json "$OUT/sampler_bench.json" 2>&1 | tee "$OUT/sampler_bench.txt"
bench_rc=${PIPESTATUS[0]}
echo "(benchmark: exit $bench_rc, $(( $(date +%s) - start )) s)"
if [[ -n ${SAMPLER_LONG_NEW:-} ]]; then  # e.g. 4096: the length, where the roofline is judged (no peer)
  "$DICE" bench sample --shapes "${SAMPLER_LONG_SHAPES:-sdar-1.7b}" --batches 128 --strategies static --graphs on \
    --fused "$([[ $FUSED == off ]] && echo off || echo on)" --no-peer --prompt-len 512 --max-new-tokens "$SAMPLER_LONG_NEW" \
    --phase-new 0 --json "$OUT/sampler_long.json" 2>&1 | tee "$OUT/sampler_long.txt"
fi
echo "targets: batch 128 static >= 6x peer and >= 50% of roofline; batch 1 >= 10x peer"

echo "== 3. operators per decode step (the dispatcher's view of what a graph replays) =="
"$DICE" bench sample --op-profile --fused "$FUSED" --shapes "${SAMPLER_SHAPES:-sdar-1.7b,sdar-4b}" 2>&1 | tee "$OUT/sampler_ops.txt"

if [[ ${SAMPLER_NCU:-0} == 1 ]]; then
  # Kernel by kernel GPU time of about one eager decode step at batch NCU_BATCH (default 1; 1.7B shape): the launches
  # of the warm-up run and the prefill are skipped, then NCU_COUNT kernels are timed. With
  # SAMPLER_FUSED on or both the profiled run is the fused one (a step is then about 400 kernels).
  echo "== 4. ncu: GPU time per kernel (eager, sdar-1.7b, batch ${NCU_BATCH:-1}) =="
  start=$(date +%s)
  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "${NCU_SKIP:-$([[ $FUSED == off ]] && echo 60000 || echo 20000)}" --launch-count "${NCU_COUNT:-2500}" \
    "$DICE" bench sample --shapes sdar-1.7b --batches "${NCU_BATCH:-1}" --strategies static --graphs off --no-peer \
    --fused "$([[ $FUSED == off ]] && echo off || echo on)" \
    --prompt-len 512 --max-new-tokens 256 --phase-new 0 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  echo "(ncu: exit $?, $(( $(date +%s) - start )) s)"
  "$PY" tools/gpu/ncu_summary.py "$OUT/ncu.csv" 30 | tee "$OUT/sampler_ncu.txt"
fi
exit $(( greedy_rc != 0 || bench_rc != 0 ))
