#!/usr/bin/env bash
# The judge as a cluster user (issue 23), run as an unprivileged user (tests/judge/as_user.sh):
#   1. `dice doctor` says the sandbox is a user namespace and holds (no file left outside scratch,
#      the user's home and the run directory included; nothing seen by the next candidate)
#   2. `dice judge` on two built-in tasks' honest solutions: both pass, as they do for root; with
#      DICE_PCH_ROOT naming root's finished precompiled headers (as_user.sh passes it on), a judge with
#      a fresh cache builds both with them and makes no PCH of its own
#   3. where user namespaces are denied (deny_userns.py: user.max_user_namespaces=0 in a namespace
#      of the test's own), `dice doctor` and `dice judge` stop with the sentence that names the
#      sysctl and the fix, and write no verdict
#   4. the same with judge.sandbox.allow_unsandboxed=true: the judge runs, says UNSANDBOXED at
#      start, and every verdict carries the flag "unsandboxed"
# usage: unprivileged_cli_test.sh DICE_BINARY SOURCE_DIR
set -uo pipefail
dice=$1
src=$2
py=${DICE_PYTHON:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) != 0 ]] || fail "runs as an unprivileged user (through tests/judge/as_user.sh), not as root"
work=$(mktemp -d "$HOME/dice_unpriv_cli.XXXXXX")  # a run directory of the user's own
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir tmp cache
export TMPDIR=$work/tmp OMP_NUM_THREADS=1

echo "== 1. dice doctor as uid $(id -u)"
"$dice" doctor > doctor.log 2>&1 || { cat doctor.log; fail "dice doctor failed as a normal user"; }
cat doctor.log
grep -q "this machine grants the user namespace" doctor.log || fail "doctor did not report the user namespace"
grep -q "in a user namespace of its own" doctor.log || fail "doctor's sandbox sentence does not name the user namespace"
grep -q " userns " doctor.log || fail "the protection userns is not among those applied"
grep -q "the judge's sandbox works here; no file left outside scratch" doctor.log || fail "the sandbox does not hold"

head -n 2 "$src/configs/tasks/builtin_cpu.jsonl" > two.jsonl
"$py" -c "
import json
for l in open('two.jsonl'):
    t = json.loads(l); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > cands.jsonl
judge=(judge --tasks two.jsonl --candidates cands.jsonl --set "cache_root=$work/cache" --set precompiled_header=false)

echo "== 2. dice judge as uid $(id -u): the honest solutions pass"
"$dice" "${judge[@]}" --out v.jsonl > judge.log 2>&1 || { cat judge.log; fail "dice judge failed as a normal user"; }
grep -q "not root: candidates run in a user namespace of their own" judge.log || { cat judge.log; fail "no start line"; }
grep -q "sandbox protections not available" judge.log && { cat judge.log; fail "a protection was refused"; }
"$py" -c "
import json, sys
vs = [json.loads(l) for l in open('v.jsonl')]
print('verdicts:', [(v['task_id'], v['failure'], v['reward'], v.get('flags', [])) for v in vs])
sys.exit(0 if len(vs) == 2 and all(v['reward'] == 1 and 'unsandboxed' not in v.get('flags', []) for v in vs) else 1)" \
  || { cat judge.log; fail "honest solutions did not pass as a normal user"; }

if [[ -n ${DICE_PCH_ROOT:-} && $(stat -c %u "$DICE_PCH_ROOT") == 0 ]]; then
  echo "== 2b. root's precompiled headers under $DICE_PCH_ROOT serve this user"
  mkdir cache_pch
  "$dice" judge --tasks two.jsonl --candidates cands.jsonl --set "cache_root=$work/cache_pch" --out vp.jsonl \
    > pch.log 2>&1 || { cat pch.log; fail "dice judge with root's PCH failed as a normal user"; }
  ! compgen -G "cache_pch/pch-*" > /dev/null || { ls -la cache_pch; fail "the user built a PCH of its own"; }
  grep -q "2 built by the fast builder, 0 by the plain build" pch.log || { cat pch.log; fail "root's PCH did not serve the builds"; }
  "$py" -c "
import json, sys
vs = [json.loads(l) for l in open('vp.jsonl')]
sys.exit(0 if len(vs) == 2 and all(v['reward'] == 1 for v in vs) else 1)" || fail "candidates built with root's PCH did not pass"
else
  echo "== 2b. skipped: DICE_PCH_ROOT does not name a directory of root's"
fi

echo "== 3. user namespaces denied: the judge and doctor refuse, with the sysctl named"
"$py" "$src/tests/judge/deny_userns.py" "$dice" doctor > deny_doctor.log 2>&1 && { cat deny_doctor.log; fail "doctor passed without user namespaces"; }
grep -q "user.max_user_namespaces=0" deny_doctor.log || { cat deny_doctor.log; fail "doctor did not name the sysctl"; }
"$py" "$src/tests/judge/deny_userns.py" "$dice" "${judge[@]}" --out refused.jsonl > deny_judge.log 2>&1
rc=$?
cat deny_judge.log
((rc == 2)) || fail "dice judge without user namespaces: exit $rc, expected 2 (a refused setting)"
grep -q "user.max_user_namespaces=0" deny_judge.log || fail "the judge's sentence does not name the sysctl"
grep -q "judge.sandbox.allow_unsandboxed=true" deny_judge.log || fail "the judge's sentence does not name the way out"
[[ ! -s refused.jsonl && ! -s refused.jsonl.partial ]] || fail "verdicts were written without a sandbox"

echo "== 4. the same with judge.sandbox.allow_unsandboxed=true: it runs, and says so"
"$py" "$src/tests/judge/deny_userns.py" "$dice" "${judge[@]}" --set sandbox.allow_unsandboxed=true --out open.jsonl \
  > open.log 2>&1 || { cat open.log; fail "dice judge with allow_unsandboxed failed"; }
grep -q "UNSANDBOXED" open.log || { cat open.log; fail "no UNSANDBOXED line at start"; }
"$py" -c "
import json, sys
vs = [json.loads(l) for l in open('open.jsonl')]
print('verdicts:', [(v['task_id'], v['failure'], v.get('flags', [])) for v in vs])
sys.exit(0 if len(vs) == 2 and all('unsandboxed' in v.get('flags', []) for v in vs) else 1)" \
  || fail "a verdict judged without a sandbox does not say so"
echo "PASS"
