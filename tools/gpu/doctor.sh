#!/usr/bin/env bash
# `dice doctor --all` for the CUDA judge on this node: which sandbox protections apply and whether
# CUDA initialises inside the sandbox. Writes $OUT/doctor.txt and, when the configured sandbox
# fails, $OUT/sandbox_fix (the overrides that make it work, "k=v" per word; empty otherwise).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_doctor}
DICE=${DICE:-build-gpu/src/app/dice}
PY=${DICE_PYTHON:-$(command -v python3)}
mkdir -p "$OUT"
"$DICE" doctor --all --set device=cuda --set "python=$PY" > "$OUT/doctor.txt" 2>&1
rc=$?
cat "$OUT/doctor.txt"
sed -n 's/.*It works with:\(.*\) (add these.*/\1/p' "$OUT/doctor.txt" | sed 's/--set //g' > "$OUT/sandbox_fix"
echo "doctor: rc=$rc fix=[$(cat "$OUT/sandbox_fix")]"
exit $rc
