#!/usr/bin/env bash
# What a candidate process's start costs on this node: one alone, then N at once (default 16).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-16}
PY=${PY:-python3}
if [ "${STARTS:-1}" = 1 ]; then
echo "== one process"; $PY tools/gpu/probe_start.py --idle 3
echo "== $N at once"
for i in $(seq "$N"); do $PY tools/gpu/probe_start.py --idle 3 > "/tmp/probe_$i.json" & done; wait
$PY - "$N" <<'PY'
import json, sys
n = int(sys.argv[1]); runs = [json.load(open(f"/tmp/probe_{i}.json")) for i in range(1, n + 1)]
for k, st in enumerate(runs[0]["stages"]):
    u = [r["stages"][k]["user"] for r in runs]; s = [r["stages"][k]["sys"] for r in runs]
    w = [r["stages"][k]["wall"] for r in runs]
    print(f"  {st['stage']:30s} user mean {sum(u)/n:6.2f}  sys mean {sum(s)/n:6.2f}  wall max {max(w):6.2f}")
PY
fi
echo "== first op record by recorder (alone, then $N at once)"
for how in kineto legacy none; do
  KINETO_USE_DAEMON= $PY tools/gpu/probe_profiler.py $how 2>/dev/null | cut -c1-900
done
for how in kineto legacy; do
  for i in $(seq "$N"); do $PY tools/gpu/probe_profiler.py $how > /tmp/pp_$i.json 2>/dev/null & done; wait
  echo "$how x$N:"; cat /tmp/pp_1.json | cut -c1-700
done
echo "== KINETO_USE_DAEMON=1"; KINETO_USE_DAEMON=1 $PY tools/gpu/probe_profiler.py kineto 2>&1 | cut -c1-700
echo "== import time (largest)"; $PY -X importtime -c "import torch" 2>&1 | sort -t'|' -k2 -n | tail -12
SP=$($PY -c "import torch,os;print(os.path.dirname(torch.__file__))")
echo "== pyc: $(find $SP -name '*.pyc' | wc -l) .pyc, $(find $SP -name '*.py' | wc -l) .py"
