#!/usr/bin/env bash
# Quickstart on a fresh CPU machine: build if needed, create a tiny random SDAR-shaped model, and
# train it with `dice train` under `mpirun -np 3` (1 learner + 2 actors): both BiC-RL stages on the
# built-in CPU tasks, with the synthetic reward (configs/train/quickstart.yaml), a checkpoint every
# 3 steps; then print where the results are.
#
# A random model writes no code, so the kernel judge would give every sample reward 0 and nothing
# to learn from; the synthetic reward (share of response tokens below id 50,000) shows the whole
# RL loop (sampler -> reward -> group advantages -> TraceRL update -> weight sync) learning.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${DICE_BUILD_DIR:-$here/build}
run=${DICE_RUN_DIR:-$here/runs/quickstart}
np=${DICE_NP:-3}

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

mkdir -p "$run"
if [[ ! -f $run/model/config.json ]]; then
  "$dice" ckpt init --config "$here/configs/models/tiny.yaml" --out "$run/model" --seed 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun -np "$np" --oversubscribe "$dice" train --config "$here/configs/train/quickstart.yaml" \
  --model "$run/model" --out "$run/train" --resume auto
echo
echo "quickstart: the synthetic reward should rise over the steps above (it measures no kernels)."
echo "quickstart: metrics $run/train/metrics.jsonl, plots $run/train/plots/, checkpoints $run/train/step_*"
echo "quickstart: evaluate a checkpoint with: $dice eval --checkpoint $run/train --tasks $here/configs/tasks/builtin_cpu.jsonl --out $run/eval"
