#!/usr/bin/env bash
# Model parity on the GPU node: dice's SDAR/Qwen3 forward (LibTorch, CUDA) against HF transformers'
# Qwen3ForCausalLM loaded from the same safetensors, with the SDAR block masks given as 4-D
# additive masks. Random weights at the tiny and SDAR-1.7B shapes; cases: block-causal prefill
# (with padding), TraceRL rows, SFT doubled sequences, KV-cache block decode. Prints, per case,
# max |logit diff| and its ratio to the logit scale, fp32 vs fp32 and bf16 vs bf16 (plus each bf16
# run against the fp32 HF logits, the bf16 noise floor). A few minutes of GPU time.
#
# usage (repo root, project built in build-gpu/): OUT=/path tools/gpu/model_parity.sh [--presets tiny,sdar-1.7b]
set -euo pipefail
: "${OUT:?set OUT to a writable folder}"
DICE="${DICE:-build-gpu/src/app/dice}"
PYTHON="${PYTHON:-python3}"
[ -x "$DICE" ] || { echo "model_parity: $DICE not found; build with: cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu" >&2; exit 2; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
"$PYTHON" tools/gpu/model_parity.py --dice "$DICE" --out "$OUT" "$@" 2>&1 | tee "$OUT/model_parity.log"
exit "${PIPESTATUS[0]}"
