#!/usr/bin/env bash
# `dice bench learner` on the GPU node. Run at the repo root after tools/gpu/build.sh.
# Writes $OUT/learner_*.txt / .json. LEARNER_STAGE picks what runs:
#   quick:   --grad-check and the 1.7B rows (static, dynamic) with the peer and --parts
#            (LEARNER_ARGS: more flags, e.g. --paths fast,composite);
#   ncu:     GPU time per kernel (ncu, tools/gpu/ncu_summary.py) of a 1.7B step cut to NCU_LAYERS
#            (2) layers, one static response (the warm-up step is profiled too);
#   profile: 1.7B static, fast and plain paths, --parts, the peer (+ its torch.profiler table);
#   final:   the must-show figures: 1.7B at 1,024 + 2 x 4,096 (static, dynamic) with the peer and
#            --parts, 4B (checkpointed), 8B without optimizer state (peak memory), --grad-check.
set -uo pipefail
OUT=${OUT:-/tmp/dice-learner-out}
mkdir -p "$OUT"
DICE=${DICE:-build-gpu/src/app/dice}
PY=${PYTHON:-python3}
STAGE=${LEARNER_STAGE:-final}
RESP=${LEARNER_RESPONSES:-4}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
run() {  # name, args...
  local name=$1; shift
  local start=$(date +%s)
  echo "== $name: dice bench learner $* =="
  "$DICE" bench learner --python "$PY" "$@" 2>&1 | grep -v "^\[r0.*info" | tee "$OUT/learner_$name.txt"
  echo "(exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s)"
}
if [[ $STAGE == quick ]]; then  # grad-check + the 1.7B rows (static, dynamic) with the peer and --parts
  run grad --grad-check --shapes sdar-1.7b
  run s17 --shapes sdar-1.7b --responses "$RESP" --parts ${LEARNER_ARGS:-} --json "$OUT/learner_s17.json"
elif [[ $STAGE == ncu ]]; then  # GPU time per kernel: 1.7B cut to NCU_LAYERS layers, 1 static response, warm-up + 1 step
  start=$(date +%s)
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip "${NCU_SKIP:-0}" \
    --launch-count "${NCU_COUNT:-200000}" "$DICE" bench learner --shapes sdar-1.7b --layers "${NCU_LAYERS:-2}" \
    --responses 1 --strategies static --no-peer --steps 1 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  echo "(ncu: exit $?, $(( $(date +%s) - start )) s)"
  "$PY" tools/gpu/ncu_summary.py "$OUT/ncu.csv" 40 | tee "$OUT/learner_ncu.txt"
elif [[ $STAGE == profile ]]; then
  run grad --grad-check --shapes sdar-1.7b
  run p17 --shapes sdar-1.7b --strategies static --paths fast,plain --responses 2 --peer-rows 2 --parts \
    --json "$OUT/learner_p17.json"
  "$PY" tools/gpu/learner_peer.py --shape sdar-1.7b --rows 1 --profile 2>&1 | tail -32 | tee "$OUT/learner_peer_profile.txt"
else
  run grad --grad-check --shapes sdar-1.7b
  run s17 --shapes sdar-1.7b --responses "$RESP" --parts --json "$OUT/learner_s17.json"
  run s4 --shapes sdar-4b --strategies static --responses 2 --peer-rows 2 --json "$OUT/learner_s4.json"
  run s8 --shapes sdar-8b --strategies static --responses 1 --no-peer --json "$OUT/learner_s8.json"
fi
