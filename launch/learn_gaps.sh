#!/usr/bin/env bash
# The DICE pipeline, small and on real rewards (issue 22, work in progress): a tiny random model
# learns the built-in CPU gap tasks (configs/tasks/builtin_cpu_gaps.jsonl: the word where a task's
# solution and its wrong twin differ is the gap).
#   1. dice sft on the solutions and the wrong twins (configs/learn/gaps_sft.yaml)
#   2. dice eval, sampled, 8 per task (configs/learn/gaps_eval.yaml)             -> eval_before
#   3. dice train, the infilling stage rewarded by the real judge (gaps_rl.yaml)   -> rl
#   4. dice eval of the RL policy                                                 -> eval_after
#   (where configs/learn/<DICE_LEARN>_eval_e2e.yaml exists, 2 and 4 also end to end -> eval_*_e2e)
#   5. dice eval report: the two side by side                                     -> compare
# DICE_LEARN=gaps_cuda runs the same on the built-in CUDA gap tasks with the CUDA judge and a 181 M
# model (configs/learn/gaps_cuda_*.yaml, configs/models/small-180m.yaml; the GPU node);
# DICE_LEARN=gaps_cuda_e2e the end-to-end stage alone (SFT, evals and RL on whole files).
# Each step resumes: a rerun reuses what is complete. Environment: DICE_RUN_DIR (runs/<DICE_LEARN>),
# DICE_BUILD_DIR (build), DICE_SFT_NP (1 rank), DICE_NP (1 rank: learner and actor colocated;
# 3 or more: 1 learner + actors),
# DICE_SFT_SET, DICE_RL_SET, DICE_EVAL_SET (space-separated key=value overrides for each step, e.g.
# DICE_SFT_SET="epochs=40 device=cpu").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${DICE_BUILD_DIR:-$here/build}
learn=${DICE_LEARN:-gaps}
case $learn in
  gaps) model_cfg=configs/models/tiny.yaml; default_run=$here/runs/learn_gaps ;;
  gaps_cuda) model_cfg=configs/models/small-180m.yaml; default_run=$here/runs/learn_gaps_cuda ;;
  gaps_cuda_e2e) model_cfg=configs/models/small-180m.yaml; default_run=$here/runs/learn_gaps_cuda_e2e ;;
  quick) model_cfg=configs/models/tiny.yaml; default_run=$here/runs/quickstart ;;
  *) echo "learn_gaps: DICE_LEARN must be gaps, gaps_cuda, gaps_cuda_e2e or quick, got '$learn'" >&2; exit 2 ;;
esac
run=${DICE_RUN_DIR:-$default_run}
dice=${DICE_BIN:-$build/src/app/dice}
cd "$here"
[[ -x $dice ]] || { echo "learn_gaps: no dice binary at $dice (build it: cmake --build build --target dice)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cache=(--set "judge.cache_root=$run/judge_cache")
# The judge's precompiled headers (~700 MB, ~2.5 min on 2 cores) are built once for every run here
export DICE_PCH_ROOT=${DICE_PCH_ROOT:-$here/runs/judge_pch}
sets() { for kv in $1; do printf -- '--set\n%s\n' "$kv"; done; }
mapfile -t sft_set < <(sets "${DICE_SFT_SET:-}")
mapfile -t rl_set < <(sets "${DICE_RL_SET:-}")
mapfile -t eval_set < <(sets "${DICE_EVAL_SET:-}")
mkdir -p "$run"
t0=$(date +%s)
stamp() { echo "learn_gaps: $1 ($(( $(date +%s) - t0 )) s)"; }

[[ -f $run/model/config.json ]] || "$dice" ckpt init --config "$model_cfg" --out "$run/model" --seed 1
# While SFT trains (one core; on the GPU node the GPU), the judge builds its precompiled headers
# (once per cache) and judges each task's solution and wrong twin, the programs SFT teaches, into the
# run's cache (its own process): the evals and RL still judge every sample; they find these builds
# made (and, with judge.reuse_verdicts, these verdicts: on the GPU node their timings were taken
# beside SFT's kernels, which moves speedups, never correctness).
tasks=$(sed -n 's/^ *path: *//p' configs/learn/${learn}_sft.yaml | head -1)
prejudge=
judge_device=cpu; [[ $learn == gaps_cuda* ]] && judge_device=cuda
if [[ ! -s $run/prejudge.jsonl ]]; then
  python3 tools/gap_candidates.py "$tasks" solution,twin > "$run/prejudge_candidates.jsonl"
  "$dice" judge --tasks "$tasks" --candidates "$run/prejudge_candidates.jsonl" --out "$run/prejudge.part" --overwrite \
    --set device=$judge_device --set "cache_root=$run/judge_cache" > "$run/prejudge.log" 2>&1 &
  prejudge=$!
  trap '[[ -n $prejudge ]] && kill "$prejudge" 2>/dev/null' EXIT  # a failed step ends the warm-up too
fi
mpirun -np "${DICE_SFT_NP:-1}" --bind-to none --oversubscribe "$dice" sft -c configs/learn/${learn}_sft.yaml --model "$run/model" \
  --out "$run/sft" --resume auto "${sft_set[@]}"
stamp "sft done"
# the eval starts beside the warm-up: its judge waits for the same precompiled headers (one build,
# under a lock) and for any program the warm-up is building (one build per program, under a lock)
"$dice" eval -c configs/learn/${learn}_eval.yaml "${cache[@]}" "${eval_set[@]}" --checkpoint "$run/sft" --out "$run/eval_before"
stamp "eval before done"
# The end-to-end eval (the reference alone, the whole file as the answer), where the run has one
e2e_eval=configs/learn/${learn}_eval_e2e.yaml; [[ -f $e2e_eval ]] || e2e_eval=
if [[ -n $e2e_eval ]]; then
  "$dice" eval -c "$e2e_eval" "${cache[@]}" "${eval_set[@]}" --checkpoint "$run/sft" --out "$run/eval_before_e2e"
  stamp "eval before (end to end) done"
fi
if [[ -n $prejudge ]]; then
  wait "$prejudge" && mv "$run/prejudge.part" "$run/prejudge.jsonl" || echo "learn_gaps: the warm-up judge failed (see $run/prejudge.log); going on"
  prejudge=
  stamp "judge warm-up done: $(grep -o '[0-9]*/[0-9]* correct' "$run/prejudge.log" || true) (solutions and twins)"
fi
np=${DICE_NP:-1}
colocated=(); [[ $np == 1 ]] && colocated=(--set dist.colocated=true)
mpirun -np "$np" --bind-to none --oversubscribe "$dice" train -c configs/learn/${learn}_rl.yaml "${cache[@]}" "${colocated[@]}" \
  --model "$(ls -d "$run"/sft/step_* | sort | tail -1)" --out "$run/rl" --resume auto "${rl_set[@]}"
stamp "rl done"
"$dice" eval -c configs/learn/${learn}_eval.yaml "${cache[@]}" "${eval_set[@]}" --checkpoint "$run/rl" --out "$run/eval_after"
stamp "eval after done"
if [[ -n $e2e_eval ]]; then
  "$dice" eval -c "$e2e_eval" "${cache[@]}" "${eval_set[@]}" --checkpoint "$run/rl" --out "$run/eval_after_e2e"
  stamp "eval after (end to end) done"
  "$dice" eval report --compare "$run/eval_before_e2e" "$run/eval_after_e2e" --out "$run/compare_e2e"
fi
"$dice" eval report --compare "$run/eval_before" "$run/eval_after" --out "$run/compare"
python3 - "$run" <<'PY'
import json, sys
run = sys.argv[1]
def rate(d):
    rows = [json.loads(l) for l in open(f"{run}/{d}/samples.jsonl")]
    return sum(bool(r["verdict"]["correct"]) for r in rows) / len(rows), len(rows)
import os
for kind in ("", "_e2e"):
    if not os.path.exists(f"{run}/eval_after{kind}/samples.jsonl"):
        continue
    (b, n), (a, _) = rate("eval_before" + kind), rate("eval_after" + kind)
    tasks = len({json.loads(l)["task_id"] for l in open(f"{run}/eval_after{kind}/samples.jsonl")})
    what = " (end to end)" if kind else ""
    print(f"learn_gaps: pass rate{what} {b:.2f} -> {a:.2f} (eval before/after RL, {tasks} tasks x {n // max(tasks, 1)} samples)")
PY
echo "learn_gaps: runs in $run (sft, rl with metrics.jsonl and plots/, eval_before, eval_after, compare)"
