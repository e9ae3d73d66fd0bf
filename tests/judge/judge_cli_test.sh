#!/usr/bin/env bash
# The judge as a command, in the situations a cluster puts it in (issue 21, items 4-6):
#   interrupt  SIGTERM during `dice eval --use-solutions` while builds run (what Slurm sends at
#              preemption and at the time limit): no record written for work the shutdown cut
#              short; the same command again finishes, every record passes, and the records equal
#              an uninterrupted run's verdicts
#   loaded     every core kept busy by other processes (twice as many spinning processes as cores):
#              an honest candidate judged with a 3 s limit still gets reward 1 (the limit binds on
#              the CPU time the candidate itself used)
#   shared_pch the suite's one PCH ($DICE_PCH_ROOT, tools/test.sh), finished by root before the tests
#              run as an unprivileged user take it as theirs (a ctest fixture): `dice judge` with a
#              fresh cache and no finished PCH under the root builds it inside the command, the
#              candidates are built by the fast builder from it (none in the cache), and no process
#              of the judge is left 2 s after the command exits
# usage: judge_cli_test.sh DICE_BINARY SOURCE_DIR SCENARIO
set -uo pipefail
dice=$1
src=$2
scenario=$3
work=$(mktemp -d /tmp/dice_judge_cli_test.XXXXXX)
chmod 755 "$work"  # the judge sandbox runs candidates as another uid
spinners=()
cleanup() {
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${DICE_PYTHON:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work"
mkdir tmp && chmod 755 tmp

# processes of ours still alive: any whose environment or command line names this test's folder
left_over() {
  local left=""
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    { tr '\0' '\n' < "$p/environ"; tr '\0' '\n' < "$p/cmdline"; } 2>/dev/null | grep -q "$work" || continue
    left+=" ${p#/proc/}($(tr '\0' ' ' 2>/dev/null < "$p/cmdline" | cut -c1-100))"
  done
  echo "$left"
}

case $scenario in
interrupt)
  head -n 4 "$src/configs/tasks/builtin_cpu.jsonl" > four.jsonl
  mkdir cache && chmod 755 cache
  sol=(eval --tasks four.jsonl --use-solutions --set "judge.cache_root=$work/cache" --set plots=false
       --set judge.precompiled_header=false --set judge.compile_workers=2)
  echo "== SIGTERM while the builds run"
  TMPDIR=$work/tmp "$dice" "${sol[@]}" --out run > run1.log 2>&1 &
  pid=$!
  for _ in $(seq 3000); do
    compgen -G "tmp/dice_judge_*/build*" > /dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  compgen -G "tmp/dice_judge_*/build*" > /dev/null || { cat run1.log; fail "no build started"; }
  sleep 2
  kill -TERM $pid
  wait $pid
  rc=$?
  [[ $rc -eq 143 ]] || { cat run1.log; fail "rc $rc (want 143: ended by SIGTERM)"; }
  sleep 2
  left=$(left_over)
  [[ -z $left ]] || fail "processes of the killed eval still run:$left"
  written=$(cat run/parts/*.jsonl 2>/dev/null | wc -l)
  echo "  records written before the signal: $written"
  "$py" - run <<'PY' || fail "a record written after the signal is not a true verdict"
import glob, json, sys
for f in glob.glob(sys.argv[1] + "/parts/*.jsonl"):
    for line in open(f):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut short by the kill is dropped on resume
        v = r["verdict"]
        assert v["correct"] and v["failure"] == "none", (r["task_id"], v["failure"], v.get("log_tail", "")[:200])
PY
  echo "== the same command again: it resumes and finishes"
  TMPDIR=$work/tmp "$dice" "${sol[@]}" --out run > run2.log 2>&1 || { cat run2.log; fail "the resumed eval failed"; }
  echo "== an uninterrupted run of the same command (its builds from the same cache, its evaluations its own)"
  TMPDIR=$work/tmp "$dice" "${sol[@]}" --out ref > ref.log 2>&1 || { cat ref.log; fail "the uninterrupted eval failed"; }
  "$py" - run ref <<'PY' || fail "the resumed run's records differ from the uninterrupted run's"
import json, sys
def records(d):
    return {(r["task_id"], r["sample_id"]): r["verdict"] for r in map(json.loads, open(d + "/samples.jsonl"))}
a, b = records(sys.argv[1]), records(sys.argv[2])
assert set(a) == set(b) and len(a) == 4, (sorted(a), sorted(b))
for k in a:
    assert a[k]["correct"] and a[k]["failure"] == "none", (k, a[k]["failure"], a[k].get("log_tail", "")[:300])
    assert (a[k]["correct"], a[k]["failure"]) == (b[k]["correct"], b[k]["failure"]), k
print("resumed: %d records, all correct, equal to the uninterrupted run's verdicts" % len(a))
PY
  ;;
loaded)
  head -n 1 "$src/configs/tasks/builtin_cpu.jsonl" > one.jsonl
  "$py" -c "import json; t = json.loads(open('one.jsonl').readline()); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > cands.jsonl
  mkdir cache && chmod 755 cache
  # built first, on a quiet machine: what is measured below is the evaluation under load
  TMPDIR=$work/tmp "$dice" judge --tasks one.jsonl --candidates cands.jsonl --out v0.jsonl --set "cache_root=$work/cache" \
    --set precompiled_header=false > judge0.log 2>&1 || { cat judge0.log; fail "dice judge (quiet) failed"; }
  cores=$(getconf _NPROCESSORS_ONLN)
  echo "== $((2 * cores)) spinning processes on $cores cores, then an honest candidate with a ${LIMIT:-3} s limit"
  for _ in $(seq $((2 * cores))); do
    sh -c 'while :; do :; done' &
    spinners+=($!)
  done
  TMPDIR=$work/tmp "$dice" judge --tasks one.jsonl --candidates cands.jsonl --out v.jsonl --set "cache_root=$work/cache" \
    --set precompiled_header=false --set exec_timeout_s=${LIMIT:-3} --set trials=3 > judge.log 2>&1 \
    || { cat judge.log; fail "dice judge failed"; }
  "$py" -c "
import json, sys
v = json.loads(open('v.jsonl').readline())
print('verdict:', v['failure'], 'reward', v['reward'], 'exec_s', round(v['exec_s'], 1))
sys.exit(0 if v['reward'] == 1 and v['failure'] == 'none' else 1)" || { cat v.jsonl; fail "the honest candidate lost its reward on a busy machine"; }
  ;;
shared_pch)
  # The suite's PCH root ($DICE_PCH_ROOT from tools/test.sh; a private one without it). In a fresh
  # build tree (CI) no PCH is finished there yet: this judge builds it inside the command.
  root=${DICE_PCH_ROOT:-$work/pch_root}
  mkdir -p "$root"
  head -n 2 "$src/configs/tasks/builtin_cpu.jsonl" > two.jsonl
  "$py" -c "
import json
for l in open('two.jsonl'):
    t = json.loads(l); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > cands.jsonl
  mkdir cache && chmod 755 cache
  fresh=yes
  compgen -G "$root/pch-*/ok" > /dev/null && fresh=
  if [[ -n $fresh ]]; then
    echo "== dice judge with no finished PCH under $root: the precompiled header is made inside the command"
  else
    echo "== $root already holds a finished PCH (a rerun in this build tree): the judge takes it; its build is not exercised this time"
  fi
  TMPDIR=$work/tmp DICE_PCH_ROOT=$root "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out v.jsonl \
    --set "cache_root=$work/cache" > judge.log 2>&1 || { cat judge.log; fail "dice judge failed"; }
  sleep 2
  left=$(left_over)
  [[ -z $left ]] || { cat judge.log; fail "processes of dice judge still run 2 s after it exited:$left"; }
  compgen -G "$root/pch-*/ok" > /dev/null || { ls -la "$root"; fail "no finished PCH under $root"; }
  [[ -s $(ls "$root"/pch-*/recipe.json | head -1) ]] || fail "no build recipe for the fast builder"
  ! compgen -G "cache/pch-*" > /dev/null || { ls -la cache; fail "a PCH was built in the judge's own cache, not under $root"; }
  grep -q "building the precompiled headers.*under $root)" judge.log || { cat judge.log; fail "the judge did not name the PCH root"; }
  grep -q "2 built by the fast builder, 0 by the plain build" judge.log || { cat judge.log; fail "the fast builder did not build both"; }
  "$py" -c "
import json, sys
vs = [json.loads(l) for l in open('v.jsonl')]
sys.exit(0 if all(v['reward'] == 1 for v in vs) and len(vs) == 2 else 1)" || { cat v.jsonl; fail "fast-built candidates are not correct"; }
  echo "  ok: the PCH under $root is finished${fresh:+ (none was before this judge started)}, both candidates fast-built from it and correct, none built in the cache, no process left"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "judge_cli_test $scenario: passed"
