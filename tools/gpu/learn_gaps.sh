#!/usr/bin/env bash
# launch/learn_gaps.sh on the GPU node (after tools/gpu/build.sh): SFT, sampling and RL updates on
# the GPU (one rank, colocated). DICE_LEARN=gaps (default): the tiny model, the CPU gap tasks judged
# on the node's cores; DICE_LEARN=gaps_cuda: the 181 M model on the CUDA gap tasks, the CUDA judge
# (first judges every task's solution and wrong twin: solutions must pass, twins must not).
# A rerun resumes each step (the run directory stays while the machine is warm). Copies the
# log, the twin verdicts, RL metrics, the eval plot and the comparison to $OUT. LIMIT_S bounds the pipeline (default 480 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
learn=${DICE_LEARN:-gaps}
run=${DICE_RUN_DIR:-runs/${learn/gaps/learn_gaps}_gpu}
dice=${DICE:-build-gpu/src/app/dice}
mkdir -p "$run"
if [[ $learn == gaps_cuda && ! -s $run/twins.jsonl && -z ${DICE_SKIP_TWINS:-} ]]; then  # DICE_SKIP_TWINS=1: not this time
  python3 - configs/tasks/builtin_cuda_gaps.jsonl > "$run/twin_candidates.jsonl" <<'PY'
import json, sys
for t in map(json.loads, open(sys.argv[1])):
    print(json.dumps({"task_id": t["id"], "sample_id": 0, "code": t["solution"]}))
    for k, w in enumerate(t["wrong_solutions"]):
        print(json.dumps({"task_id": t["id"], "sample_id": 1 + k, "code": w["code"]}))
PY
  timeout 300 "$dice" judge --tasks configs/tasks/builtin_cuda_gaps.jsonl --candidates "$run/twin_candidates.jsonl" \
    --out "$run/twins.part" --set device=cuda --set "cache_root=$run/judge_cache" 2>&1 | grep -v "^\[" | tail -4
  [[ ${PIPESTATUS[0]} == 0 ]] && mv "$run/twins.part" "$run/twins.jsonl"  # a cut-off check reruns next call
  cp "$run/twins.jsonl" "$OUT/" 2>/dev/null
  python3 - "$run/twins.jsonl" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
bad = [(r["task_id"], r["sample_id"]) for r in rows if bool(r["correct"]) != (r["sample_id"] == 0)]
ok = "yes" if rows and not bad else "NO " + str(bad or "(no verdicts)")
print(f"twins: {len(rows)} judged, solutions pass and twins fail: {ok}")
PY
fi
sft_default=; [[ $learn == gaps ]] && sft_default=epochs=200  # the CUDA runs: their configs' own (450, 400)
DICE_BIN=$dice DICE_LEARN=$learn DICE_RUN_DIR=$run DICE_SFT_NP=1 DICE_NP=1 \
  DICE_SFT_SET=${DICE_SFT_SET:-$sft_default} DICE_RL_SET="dist.colocated=true ${DICE_RL_SET:-}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} \
  timeout "${LIMIT_S:-480}" bash launch/learn_gaps.sh > "$OUT/learn_gaps.log" 2>&1
echo "learn_gaps: exit $?"
grep -v "judged \|sampled " "$OUT/learn_gaps.log" | grep -v "^step " | tail -40
grep "^step " "$OUT/learn_gaps.log" | awk 'NR % 50 == 1' | tail -20
grep "^step " "$OUT/learn_gaps.log" | tail -3
# the device returns at most 8 files (tools/gpu/build.sh leaves 2): the log, the twins, these four
cp "$run/rl/metrics.jsonl" "$OUT/rl_metrics.jsonl" 2>/dev/null
cp "$run/rl/plots/eval.png" "$OUT/rl_eval.png" 2>/dev/null
cp "$run/compare/compare.md" "$OUT/compare.md" 2>/dev/null
cp "$run/compare_e2e/compare.md" "$OUT/compare_e2e.md" 2>/dev/null
ls "$run" 2>/dev/null
# the in-training eval curve (eval.every in the RL config) into the log: the run directory stays on the node
[[ -s $run/rl/metrics.jsonl ]] && python3 - "$run/rl/metrics.jsonl" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    e = {k: v for k, v in r.items() if k.startswith("eval")}
    if e:
        print("eval curve: step", r.get("step"), json.dumps(e))
PY
