#!/usr/bin/env bash
# Checkpoint round trip at a real SDAR shape on the GPU node (CPU-side work: init, HDF5 write with
# SHA-256 on worker threads, verify, safetensors export), plus the ckpt unit tests there.
#   Run at the repo root after `cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu`:
#     OUT=/tmp/out bash tools/gpu/ckpt_roundtrip.sh            # PRESET=sdar-4b by default (~8 GB bf16)
# Needs ~3x the model size of free disk under $WORK (default: a temp dir). Prints seconds and GB/s.
set -euo pipefail
PRESET=${PRESET:-sdar-4b}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-$(mktemp -d)}
BUILD=${BUILD:-build-gpu}
DICE=${DICE:-$BUILD/src/app/dice}
mkdir -p "$OUT"
trap 'rm -rf "$WORK"' EXIT

echo "== ctest -L ckpt ($BUILD)"
ctest --test-dir "$BUILD" -L ckpt --output-on-failure 2>&1 | tail -n 15 | tee "$OUT/ctest_ckpt.txt"

timed() {  # timed NAME CMD... -> prints and records wall seconds
  local name=$1; shift
  local t0=$(date +%s.%N)
  "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name"; tail -n 20 "$OUT/$name.log"; exit 1; }
  local t1=$(date +%s.%N)
  local s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
  echo "$name $s" >> "$OUT/timings.txt"
  printf '%-10s %8.1f s\n' "$name" "$s"
}

echo "== $PRESET: init, import-hf, info (verify), export-hf; nproc=$(nproc)"
timed init      "$DICE" ckpt init --preset "$PRESET" --out "$WORK/model"
BYTES=$(du -sb --apparent-size "$WORK/model" | cut -f1)
timed import    "$DICE" ckpt import-hf --hf "$WORK/model" --out "$WORK/run"
timed info      "$DICE" ckpt info "$WORK/run"
timed export    "$DICE" ckpt export-hf --checkpoint "$WORK/run" --out "$WORK/export"
cat "$OUT/info.log"

echo "== byte-compare weights (init output vs export of its checkpoint)"
for f in "$WORK"/model/*.safetensors; do
  cmp "$f" "$WORK/export/$(basename "$f")" && echo "identical: $(basename "$f")"
done
echo "== throughput (model folder $((BYTES / 1000000)) MB)"
while read -r name s; do
  awk -v n="$name" -v b="$BYTES" -v s="$s" 'BEGIN{printf "%-10s %6.2f GB/s\n", n, b / s / 1e9}'
done < "$OUT/timings.txt"
