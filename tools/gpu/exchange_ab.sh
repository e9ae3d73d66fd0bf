#!/usr/bin/env bash
# Issue 21 on the GPU node: the tensor exchange of this tree's harness against another's, in one run.
#   1. tools/bench_exchange.py with each harness (draw, write, read, compare of a 1 GiB task on the GPU)
#   2. `dice judge` on the first N_TASKS built-in CUDA solutions: once with this harness (builds them and
#      checks the verdicts), then, builds warm, with OLD's and with this one's again: what differs is
#      execution alone (exec_s per verdict, the judge's own rate)
# usage (repo root):  OLD=harness_dir [DICE=.gpu/dice] [N_TASKS=8] [LIMIT_S=300] OUT=dir tools/gpu/exchange_ab.sh
#   OLD: e.g. `git archive REV src/judge/python | tar -x -C /tmp/old` -> /tmp/old/src/judge/python
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_exchange_ab}
mkdir -p "$OUT"
PY=$(command -v python3)
DICE=$(readlink -f "${DICE:-build-gpu/src/app/dice}")
[[ -x $DICE ]] || { echo "exchange_ab.sh: $DICE not found" >&2; exit 2; }
[[ -f ${OLD:-}/harness.py ]] || { echo "exchange_ab.sh: OLD must be a harness directory" >&2; exit 2; }
OLD=$(readlink -f "$OLD")
NEW=$PWD/src/judge/python
echo "== 1. tools/bench_exchange.py"
for h in "$OLD" "$NEW"; do
  echo "-- $h"
  "$PY" tools/bench_exchange.py "$h" 2>&1 | tail -8
done
head -n "${N_TASKS:-8}" configs/tasks/builtin_cuda.jsonl > "$OUT/tasks.jsonl"
"$PY" -c "
import json, sys
for l in open(sys.argv[1]):
    t = json.loads(l); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" "$OUT/tasks.jsonl" > "$OUT/cands.jsonl"
cache=$(mktemp -d /tmp/dice-xab.XXXXXX)
chmod 755 "$cache"
judge() {  # label harness_dir
  local t0=$SECONDS
  timeout "${LIMIT_S:-300}" "$DICE" judge --tasks "$OUT/tasks.jsonl" --candidates "$OUT/cands.jsonl" --out "$OUT/$1.jsonl" \
    --set device=cuda --set "python=$PY" --set "cache_root=$cache" --set "harness_dir=$2" > "$OUT/$1.log" 2>&1
  echo "$1: exit $? after $((SECONDS - t0)) s; $(grep -h "^judge: .*correct" "$OUT/$1.log" | tail -1)"
}
echo "== 2. dice judge, $(wc -l < "$OUT/cands.jsonl") built-in CUDA solutions"
judge cold_new "$NEW"
judge warm_old "$OLD"
judge warm_new "$NEW"
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
runs = {}
for name in ("cold_new", "warm_old", "warm_new"):
    try:
        runs[name] = {r["task_id"]: r for r in map(json.loads, open("%s/%s.jsonl" % (sys.argv[1], name)))}
    except OSError:
        runs[name] = {}
for name, rs in runs.items():
    ex = [r["exec_s"] for r in rs.values()]
    print("%-9s %2d verdicts, %2d correct, exec_s median %s" % (name, len(rs), sum(r["correct"] for r in rs.values()),
          "%.1f" % statistics.median(ex) if ex else "-"))
old, new = runs["warm_old"], runs["warm_new"]
both = sorted(set(old) & set(new))
print("same verdicts (failure class, reward) old vs new on %d tasks both judged: %d" % (
    len(both), sum((old[k]["failure"], old[k]["reward"]) == (new[k]["failure"], new[k]["reward"]) for k in both)))
for k in both:
    print("  %-36s old %-8s %5.1f s   new %-8s %5.1f s" % (k, old[k]["failure"], old[k]["exec_s"], new[k]["failure"], new[k]["exec_s"]))
PY
