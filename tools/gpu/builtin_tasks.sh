#!/usr/bin/env bash
# GPU check of the built-in CUDA task set (configs/tasks/builtin_cuda.jsonl): builds all 34 honest
# solutions in parallel on the CPUs, then runs each against its reference on the GPU (2 seeded
# trials, allclose atol = rtol = 1e-4) and times both with CUDA events. Run at the repo root on the
# GPU node; results in $OUT/builtin_cuda_check.json and $OUT/builtin_cuda_check.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_gpu_out}
mkdir -p "$OUT"
PY=${DICE_PYTHON:-python3}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/dice_builtin_ext}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=2
jobs=${TASKS_JOBS:-$(nproc)}  # one nvcc build per core (MAX_JOBS=2 each; builds wait on I/O and the host compiler)
echo "== building the CUDA solutions ($jobs in parallel)"
$PY tools/tasks/check_builtin.py --tasks configs/tasks/builtin_cuda.jsonl --build-only --jobs "$jobs" 2>&1 \
  | tee "$OUT/builtin_cuda_build.log" | grep -v '^built ' | tail -60
echo "== checking against the references on the GPU"
$PY tools/tasks/check_builtin.py --tasks configs/tasks/builtin_cuda.jsonl --trials 2 \
  --json "$OUT/builtin_cuda_check.json" 2>&1 | tee "$OUT/builtin_cuda_check.log"
