#!/usr/bin/env bash
# Facts for a crash or a sandbox failure on the GPU node: mounts, device nodes, and, when
# `dice doctor` dies of a signal, a backtrace from cuda-gdb (there is no gdb on the node).
set -uo pipefail
cd "$(dirname "$0")/../.."
DICE=${DICE:-build-gpu/src/app/dice}
PY=${DICE_PYTHON:-$(command -v python3)}
echo "== mountinfo"; cat /proc/self/mountinfo
echo "== /dev/nvidia*"; ls -la /dev/nvidia* 2>&1
echo "== uname"; uname -a
"$DICE" doctor --all --set device=cuda --set "python=$PY" 2>&1 | tail -40
rc=${PIPESTATUS[0]}
echo "doctor rc=$rc"
if (( rc >= 128 )); then
  gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
  echo "== backtrace ($gdb)"
  [[ -n $gdb ]] && timeout 240 "$gdb" -batch -ex run -ex bt -ex "info registers rip" -ex "x/4i \$pc" \
    --args "$DICE" doctor --all --set device=cuda --set "python=$PY" 2>&1 | grep -vE "^\[(New|Detaching|Inferior)" | tail -60
fi
