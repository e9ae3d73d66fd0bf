#!/usr/bin/env bash
# Issue 23 on the GPU node (which runs commands as root): the judge's sandbox as a cluster user.
#   1. `dice doctor --set device=cuda` as root and as an unprivileged user (created here)
#   2. the built-in CUDA solutions judged as root and as that user (`dice judge`, the same settings):
#      the verdicts must be the same, task by task
# usage (repo root, project built in build-gpu/):  OUT=/path tools/gpu/unprivileged.sh
#   N_TASKS (default 34: all of configs/tasks/builtin_cuda.jsonl), SETS (more "--set k=v" words for both judges)
#   DICE (default build-gpu/src/app/dice); DEVICE=cpu with the CPU tasks tries the script on a CPU machine
# Results: $OUT/unpriv_doctor_{root,user}.txt, $OUT/unpriv_{root,user}.jsonl, $OUT/unpriv_summary.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_unpriv}
DICE=$(readlink -f "${DICE:-build-gpu/src/app/dice}")
PY=${DICE_PYTHON:-$(command -v python3)}
user=${DICE_TEST_USER:-dice-ci}
mkdir -p "$OUT"
[[ -x $DICE ]] || { echo "unprivileged.sh: $DICE not found (tools/gpu/build.sh first)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "unprivileged.sh: run as root (it creates the user)" >&2; exit 2; }
id -u "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
# the binary, the sources and the interpreter must be reachable by the user (o+x on the way)
for p in "$DICE" "$PWD/src/judge/python/runner.py" "$PY"; do
  d=$(dirname "$(readlink -f "$p")")
  while [[ $d != / ]]; do
    [[ $(stat -c %A "$d") == ?????????[xt]* ]] || { echo "o+x on $d"; chmod o+x "$d"; }
    d=$(dirname "$d")
  done
done
as_user() {  # seconds, command...
  local t=$1; shift
  timeout "$t" setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups --inh-caps=-all \
    env -i PATH="$PATH" HOME="$home" USER="$user" LANG=C.UTF-8 ${CUDA_HOME:+CUDA_HOME=$CUDA_HOME} \
    ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH=$LD_LIBRARY_PATH} "$@"
}
work=$home/unpriv_work
rm -rf "$work" /tmp/dice-unpriv-root
mkdir -p "$work" /tmp/dice-unpriv-root && chown "$user:" "$work"
head -n "${N_TASKS:-34}" "configs/tasks/builtin_${DEVICE:=cuda}.jsonl" > "$work/tasks.jsonl"
$PY -c "
import json
for l in open('$work/tasks.jsonl'):
    t = json.loads(l); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > "$work/cands.jsonl"
chmod 644 "$work"/*.jsonl
sets=(--set "device=$DEVICE" --set "python=$PY" ${SETS:-})  # the judge's defaults (timing off)

echo "== 1. dice doctor --set device=$DEVICE, as root and as $user"
timeout 300 "$DICE" doctor --set "device=$DEVICE" --set "python=$PY" > "$OUT/unpriv_doctor_root.txt" 2>&1
echo "root: exit $?"; tail -3 "$OUT/unpriv_doctor_root.txt"
(cd "$work" && as_user 300 "$DICE" doctor --set "device=$DEVICE" --set "python=$PY") > "$OUT/unpriv_doctor_user.txt" 2>&1
echo "$user: exit $?"; cat "$OUT/unpriv_doctor_user.txt"

echo "== 2. the built-in $DEVICE solutions, as root and as $user (both at once, JUDGE_LIMIT_S ${JUDGE_LIMIT_S:=420} s each)"
timeout "$JUDGE_LIMIT_S" "$DICE" judge --tasks "$work/tasks.jsonl" --candidates "$work/cands.jsonl" \
  --out "$OUT/unpriv_root.jsonl" "${sets[@]}" --set cache_root=/tmp/dice-unpriv-root > "$OUT/unpriv_judge_root.log" 2>&1 &
rootpid=$!
t0=$SECONDS
(cd "$work" && as_user "$JUDGE_LIMIT_S" "$DICE" judge --tasks tasks.jsonl --candidates cands.jsonl --out v.jsonl \
  "${sets[@]}" --set "cache_root=$work/cache") > "$OUT/unpriv_judge_user.log" 2>&1
echo "$user: exit $? after $((SECONDS - t0)) s"; grep -E "not root|correct|classes|protections" "$OUT/unpriv_judge_user.log"
wait $rootpid
echo "root: exit $? after $((SECONDS - t0)) s"; grep -E "correct|classes" "$OUT/unpriv_judge_root.log"
for f in v.jsonl v.jsonl.partial; do [[ -f $work/$f ]] && cp "$work/$f" "$OUT/unpriv_user.jsonl"; done
[[ -f $OUT/unpriv_root.jsonl ]] || cp "$OUT/unpriv_root.jsonl.partial" "$OUT/unpriv_root.jsonl" 2>/dev/null
$PY - "$OUT/unpriv_root.jsonl" "$OUT/unpriv_user.jsonl" <<'PY' | tee "$OUT/unpriv_summary.txt"
import json, sys
def load(p):
    try:
        return {r["task_id"]: r for r in map(json.loads, open(p)) if r}
    except OSError:
        return {}
a, b = load(sys.argv[1]), load(sys.argv[2])
both = [k for k in a if k in b]
diff = [k for k in both if a[k]["failure"] != b[k]["failure"]]
for k in diff:
    print("differs:", k, a[k]["failure"], "->", b[k]["failure"], "|", b[k].get("log_tail", "")[-300:])
for k in both:
    if a[k]["failure"] != "none":
        print("root:", k, a[k]["failure"], a[k].get("log_tail", "")[-300:])
print(f"root {sum(r['failure'] == 'none' for r in a.values())}/{len(a)} pass, "
      f"user {sum(r['failure'] == 'none' for r in b.values())}/{len(b)} pass, "
      f"{len(both) - len(diff)}/{len(both)} verdicts equal on the tasks both judged")
sys.exit(1 if diff or not both else 0)
PY
