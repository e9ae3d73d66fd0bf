#!/usr/bin/env bash
# Compiles (syntax and types only) sources against a LibTorch 2.x's headers on a CPU machine whose
# own LibTorch is Debian bookworm's 1.13: the code paths behind DICE_TORCH_AT_LEAST(2, x) (and,
# with CUDA headers, the CUDA ones) are otherwise first compiled on the GPU node. Fetches Debian
# trixie's libtorch-dev (2.6 headers, about 2.5 MB) once into $DICE_TORCH2_DIR (default
# /tmp/dice-torch2), without installing it. Needs build/compile_commands.json.
#   tools/dev/torch2_syntax_check.sh [src/model/transformer.cpp ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${DICE_TORCH2_DIR:-/tmp/dice-torch2}
cuda=${CUDA_INCLUDE:-/usr/local/cuda/include}
inc=$dir/root/usr/include
if [[ ! -f $inc/ATen/ATen.h ]]; then
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/root"
  echo "deb http://deb.debian.org/debian trixie main" > "$dir/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$dir/lists"
            -o "Dir::Cache=$dir/cache")
  apt-get "${apt_opts[@]}" update > "$dir/update.log" 2>&1 || { tail -5 "$dir/update.log"; exit 2; }
  (cd "$dir" && apt-get "${apt_opts[@]}" download libtorch-dev > download.log 2>&1) || { tail -5 "$dir/download.log"; exit 2; }
  dpkg-deb -x "$dir"/libtorch-dev_*.deb "$dir/root"
fi
version=$(ls "$dir"/libtorch-dev_*.deb | sed -E 's/.*libtorch-dev_([0-9]+)\.([0-9]+)\..*/\1 \2/')
read -r major minor <<< "$version"
# The package has no torch/version.h, and the CUDA build's generated macro header is not in it.
mkdir -p "$dir/shim/torch" "$dir/shim/c10/cuda/impl"
printf '#pragma once\n#define TORCH_VERSION_MAJOR %s\n#define TORCH_VERSION_MINOR %s\n#define TORCH_VERSION_PATCH 0\n' \
  "$major" "$minor" > "$dir/shim/torch/version.h"
echo '#pragma once' > "$dir/shim/c10/cuda/impl/cuda_cmake_macros.h"
extra="-I$dir/shim -I$inc -I$inc/torch/csrc/api/include"
[[ -f $cuda/cuda_runtime_api.h ]] && extra+=" -DDICE_WITH_CUDA=1 -DDICE_WITH_FUSED_KERNELS=1 -I$cuda"
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(src/model/transformer.cpp src/model/fused_ops.cpp src/rollout/sampler.cpp src/bench/sample.cpp)
rc=0
for f in "${files[@]}"; do
  cmd=$(python3 tools/dev/compile_command.py "$f")
  [[ -n $cmd ]] || { echo "$f: not in build/compile_commands.json" >&2; rc=1; continue; }
  # no precompiled header (it holds the 1.13 headers); the 2.x headers come before the system's
  cmd=$(sed -E 's/-include [^ ]*cmake_pch\.hxx//g; s/-Winvalid-pch//g' <<< "$cmd")
  if (cd build && eval "${cmd/ -o / $extra -fsyntax-only -o }"); then
    echo "$f: compiles against LibTorch $major.$minor headers"
  else
    rc=1
  fi
done
exit $rc
