#!/usr/bin/env bash
# Compiles (syntax and types only) the CUDA-only code paths of some sources on a CPU machine:
# Debian's LibTorch ships the ATen/c10 CUDA headers; this adds the CUDA toolkit's headers and the
# one generated header Debian leaves out, and turns the CUDA guards on. Catches compile errors
# before a GPU build (device time) does. Needs build/compile_commands.json and a CUDA toolkit's
# include directory (CUDA_INCLUDE, default /usr/local/cuda/include).
#   tools/dev/cuda_syntax_check.sh [src/rollout/sampler.cpp ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
inc=${CUDA_INCLUDE:-/usr/local/cuda/include}
[[ -f $inc/cuda_runtime_api.h ]] || { echo "no CUDA headers in $inc (set CUDA_INCLUDE)" >&2; exit 2; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/c10/cuda/impl" && echo '#pragma once' > "$shim/c10/cuda/impl/cuda_cmake_macros.h"
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(src/rollout/sampler.cpp)
rc=0
for f in "${files[@]}"; do
  cmd=$(python3 tools/dev/compile_command.py "$f")
  [[ -n $cmd ]] || { echo "$f: not in build/compile_commands.json" >&2; rc=1; continue; }
  if (cd build && eval "${cmd/ -o / -DDICE_WITH_CUDA=1 -DDICE_WITH_FUSED_KERNELS=1 -I$shim -I$inc -fsyntax-only -o }"); then
    echo "$f: CUDA paths compile"
  else
    rc=1
  fi
done
exit $rc
