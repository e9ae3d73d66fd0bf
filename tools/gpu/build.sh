#!/usr/bin/env bash
# Builds dice on the GPU node into build-gpu/ (Release, CUDA LibTorch from the installed PyTorch).
# With OUT set, also leaves a stripped copy of the binary in $OUT/dice for later calls to carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc)
start=$(date +%s)
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)  # the CUDA LibTorch
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release ${prefix:+-DCMAKE_PREFIX_PATH=$prefix} "$@" > /tmp/dice-cmake.log 2>&1 \
  || { tail -40 /tmp/dice-cmake.log; exit 1; }
grep -E "dice:" /tmp/dice-cmake.log
ninja -C build-gpu -j "$jobs" -k 0 ${BUILD_TARGETS:-} > /tmp/dice-build.log 2>&1  # BUILD_TARGETS=dice: just the CLI
rc=$?
grep -E "error|FAILED" -A3 /tmp/dice-build.log | head -80
if [[ $rc != 0 ]] && grep -q "/Unity/unity_" /tmp/dice-build.log; then
  # two files of a unity batch clash only in code that CPU builds do not compile (CUDA, NCCL): say so
  # loudly, and build file by file so that the node's time is not lost (fix the names in the source)
  echo "build: the unity build FAILED (above); building file by file (-DDICE_UNITY_BUILD=OFF)"
  cmake build-gpu -DDICE_UNITY_BUILD=OFF >> /tmp/dice-cmake.log 2>&1
  ninja -C build-gpu -j "$jobs" -k 0 ${BUILD_TARGETS:-} > /tmp/dice-build.log 2>&1
  rc=$?
  grep -E "error|FAILED" -A3 /tmp/dice-build.log | head -40
fi
echo "build: exit $rc in $(( $(date +%s) - start )) s"
if [[ -n ${OUT:-} && -x build-gpu/src/app/dice ]]; then
  strip -o "$OUT/dice" build-gpu/src/app/dice && ls -la "$OUT/dice"
  cp /tmp/dice-build.log "$OUT/build.log"
fi
exit $rc
