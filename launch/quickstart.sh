#!/usr/bin/env bash
# Quickstart on a fresh CPU machine: build if needed, create a tiny random SDAR-shaped model,
# evaluate it with `mpirun -np 2` on the built-in CPU task set, print the report table.
#
# A random model writes no code, so Exec = 0 is the honest result here; the point is that the
# whole pipeline (tokenizer -> block-diffusion sampler -> judge -> metrics -> report) runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${DICE_BUILD_DIR:-$here/build}
run=${DICE_RUN_DIR:-$here/runs/quickstart}
np=${DICE_NP:-2}

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
mpirun -np "$np" --oversubscribe "$dice" eval --config "$here/configs/eval/quickstart.yaml" \
  --checkpoint "$run/model" --tasks "$here/configs/tasks/builtin_cpu.jsonl" --out "$run/eval"
echo
cat "$run/eval/report.md"
echo
echo "quickstart: a random model writes no kernels, so Exec 0.0 is the expected, honest result."
echo "quickstart: per-sample records in $run/eval/samples.jsonl, plots in $run/eval/*.png"
