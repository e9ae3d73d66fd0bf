#!/usr/bin/env bash
# Quickstart on a fresh CPU machine: build if needed, then the whole DICE pipeline, small and on the
# real reward (launch/learn_gaps.sh with DICE_LEARN=quick): a tiny random SDAR-shaped model is
# fine-tuned (dice sft) on six built-in CPU tasks' honest solutions and their wrong twins, evaluated
# (dice eval, 6 tasks x 8 samples), trained by BiC-RL's infilling stage with the kernel judge's exec
# reward (dice train; the judge compiles, runs and checks every sample), and evaluated again; the last
# lines give the pass rate before and after RL and where the run and its plots are.
#
# DICE_QUICKSTART=synthetic runs the older demo instead: both BiC-RL stages with a synthetic reward
# (the share of response tokens below id 50,000; configs/train/quickstart.yaml) under mpirun -np 3,
# which shows the RL loop's mechanics in a few minutes but measures no kernels.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${DICE_BUILD_DIR:-$here/build}
run=${DICE_RUN_DIR:-$here/runs/quickstart}

if [[ ! -f $here/data/qwen3/tokenizer.json ]]; then
  echo "quickstart: fetching dependencies and tokenizer (tools/install-deps.sh)"
  bash "$here/tools/install-deps.sh"
fi
if [[ ! -x $build/src/app/dice ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j "$(nproc)" --target dice
dice=$build/src/app/dice
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
t0=$(date +%s)

if [[ ${DICE_QUICKSTART:-} == synthetic ]]; then
  mkdir -p "$run"
  [[ -f $run/model/config.json ]] || "$dice" ckpt init --config "$here/configs/models/tiny.yaml" --out "$run/model" --seed 1
  mpirun -np "${DICE_NP:-3}" --oversubscribe "$dice" train --config "$here/configs/train/quickstart.yaml" \
    --model "$run/model" --out "$run/train" --resume auto
  echo
  echo "quickstart: the synthetic reward should rise over the steps above (it measures no kernels)."
  echo "quickstart: metrics $run/train/metrics.jsonl, plots $run/train/plots/, checkpoints $run/train/step_*"
  exit 0
fi

DICE_LEARN=quick DICE_RUN_DIR=$run DICE_BUILD_DIR=$build bash "$here/launch/learn_gaps.sh" 2>&1 |
  grep --line-buffered -v '^judge [0-9]\|^eval: \(sampled\|judged\) [0-9]'
echo
echo "quickstart: $(( $(date +%s) - t0 )) s after the build"
echo "quickstart: RL metrics $run/rl/metrics.jsonl, plots $run/rl/plots/ (reward and eval over steps)"
echo "quickstart: the evals side by side $run/compare/compare.md; each eval's report, plots and samples with verdicts in $run/eval_before/ and $run/eval_after/"
