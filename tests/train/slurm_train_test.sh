#!/usr/bin/env bash
# `dice train` (or, with DICE_SLURM_TEST_SUBCOMMAND=sft, `dice sft`) through slurm/train.sbatch on
# a private one-node Slurm cluster, with a crash (tests/train/train_test.yaml, or for sft
# configs/sft/quickstart.yaml, on a tiny random model, 3 ranks, checkpoints every 2 steps):
#  1. rank DICE_SLURM_TEST_FAULT_RANK (default 1) SIGKILLs itself at the start of step 3 on the
#     first attempt only (fault.kill_at_step / fault.once_file), after the checkpoint of step 2;
#  2. between the attempts the run dir holds step_000002 (COMPLETE) and metrics for steps 1-2;
#  3. the job requeued itself once (two attempts in its log, Restarts=1) and ended COMPLETED, 0:0;
#  4. metrics.jsonl holds every step 1..N exactly once, the final checkpoint step_N is COMPLETE,
#     and the second attempt resumed: step_000002 and the records of steps 1-2 are the first
#     attempt's, not recomputed.
# usage: slurm_train_test.sh BUILD_DIR SOURCE_DIR
# Exit 77 (CTest: skipped) when this machine cannot run a Slurm cluster: not root, or slurmctld,
# slurmd, munged not installed (Debian: slurm-wlm munge).
# Environment: DICE_SLURM_TEST_ARGS (extra `dice train` args, word-split), DICE_SLURM_TEST_STEPS
# (default 4), DICE_SLURM_TEST_NTASKS (default 3: 1 learner + 2 actors), DICE_SLURM_TEST_SUBCOMMAND
# (train or sft; default train), DICE_SLURM_TEST_LAUNCHER
# (srun or mpirun; default srun), DICE_SLURM_TEST_WAIT_S (default 480), DICE_KEEP_TEST_DIR=1.
set -euo pipefail
build=${1:?usage: slurm_train_test.sh BUILD_DIR SOURCE_DIR}
src=$(cd "${2:?usage: slurm_train_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
export PATH=$PATH:/usr/sbin:/sbin

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to run slurmd and munged (the test cluster launches job steps)"
missing=()
for b in slurmctld slurmd munged sbatch scontrol squeue; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
((${#missing[@]} == 0)) || skip "not installed: ${missing[*]} (Debian: apt-get install slurm-wlm munge)"

dice=$build/src/app/dice
[[ -x $dice ]] || fail "no dice binary at $dice (build the project first)"
sub=${DICE_SLURM_TEST_SUBCOMMAND:-train}
"$dice" "$sub" --help > /dev/null 2>&1 || fail "$dice has no \`$sub\` subcommand (\`dice $sub --help\` failed)"
case $sub in
  train) config=$src/tests/train/train_test.yaml; keys="step stage reward_mean loss"; sub_args=() ;;
  # Short examples (max_tokens 512: 15 built-in tasks, 4 steps of 4), a checkpoint every 2 steps.
  sft) config=$src/configs/sft/quickstart.yaml; keys="step epoch loss ce_masked"
       sub_args=(--set data.max_tokens=512 --set ckpt.every=2) ;;
  *) fail "DICE_SLURM_TEST_SUBCOMMAND must be train or sft, not '$sub'" ;;
esac
[[ -f $config ]] || fail "missing $config (the CPU test config)"

steps=${DICE_SLURM_TEST_STEPS:-4}
ntasks=${DICE_SLURM_TEST_NTASKS:-3}
fault_rank=${DICE_SLURM_TEST_FAULT_RANK:-1}
launcher=${DICE_SLURM_TEST_LAUNCHER:-srun}
wait_s=${DICE_SLURM_TEST_WAIT_S:-480}
((steps >= 3)) || fail "DICE_SLURM_TEST_STEPS must be at least 3 (the fault is at step 3)"

# A Slurm job around this test (CI inside sbatch) must not leak into the private cluster's jobs.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN)_' || true)

work=$(mktemp -d /tmp/dice_slurm_test.XXXXXX)
chmod 755 "$work"  # the judge sandbox runs candidates as another uid
cluster=$work/cluster
run=$work/run
# A port pair of its own, so a second checkout's test on this machine does not collide.
export DICE_SLURM_PORT=$((17000 + 2 * ($$ % 4000)))
job=""
ok=0

dump() {
  if [[ -n $job ]]; then
    echo "---- job log" >&2
    cat "$work/dice-train-$job.out" >&2 2>/dev/null || true
    scontrol show job "$job" >&2 2>/dev/null || true
  fi
  echo "---- run dir" >&2
  ls -la "$run" >&2 2>/dev/null || true
  for f in slurmctld slurmd; do
    echo "---- $f.log (tail)" >&2
    tail -n 15 "$cluster/log/$f.log" >&2 2>/dev/null || true
  done
}
cleanup() {
  ((ok)) || dump
  bash "$src/tools/slurm/local_cluster.sh" stop "$cluster" > /dev/null 2>&1 || true
  if [[ ${DICE_KEEP_TEST_DIR:-0} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "== local Slurm cluster in $cluster (ports $DICE_SLURM_PORT, $((DICE_SLURM_PORT + 1)))"
set +e
bash "$src/tools/slurm/local_cluster.sh" start "$cluster"
rc=$?
set -e
((rc == 77)) && { ok=1; skip "tools/slurm/local_cluster.sh cannot run here"; }
((rc == 0)) || fail "the local cluster did not start (tools/slurm/local_cluster.sh start: $rc)"
export SLURM_CONF=$cluster/etc/slurm.conf
if [[ $launcher == srun ]] && ! srun --mpi=list 2>&1 | grep -q pmix; then
  echo "srun has no pmix plugin here: launching with mpirun inside the allocation instead"
  launcher=mpirun
fi

echo "== tiny random model"
"$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out "$work/model" --seed 1 > "$work/init.log" 2>&1 \
  || { cat "$work/init.log" >&2; fail "dice ckpt init"; }

echo "== sbatch slurm/train.sbatch ($sub): $ntasks ranks, $steps steps, rank $fault_rank dies at step 3 (first attempt)"
cd "$work"  # the job's log, %x-%j.out, lands here
extra=()
# shellcheck disable=SC2206  # word splitting is the interface of DICE_SLURM_TEST_ARGS
[[ -n ${DICE_SLURM_TEST_ARGS:-} ]] && extra=($DICE_SLURM_TEST_ARGS)
# The header asks for 8 GPUs a node and 8 tasks: a CPU node has neither. --overcommit lets 3
# ranks share 2 cores.
job=$(DICE_BIN=$dice DICE_ROOT=$src DICE_LAUNCHER=$launcher DICE_SUBCOMMAND=$sub \
  sbatch --parsable --ntasks="$ntasks" --ntasks-per-node="$ntasks" --gpus-per-node=0 --overcommit --time=30 \
  "$src/slurm/train.sbatch" "$config" "$run" --model "$work/model" --steps "$steps" \
  --set fault.kill_at_step=3 --set "fault.once_file=$work/fault_once" --set "fault.rank=$fault_rank" \
  "${sub_args[@]}" "${extra[@]}") || fail "sbatch refused the job"
job=${job%%;*}
log=$work/dice-train-$job.out
echo "job $job, log $log"

# Poll the job (no accounting here, so no sacct): scontrol keeps a finished job for MinJobAge.
# Between the attempts (>= 10 s: the cluster's cred_expire) look at what the first one left.
state=""
between=0
for ((i = 0; i < wait_s * 2; i++)); do
  state=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;; esac
  if ((!between)) && [[ -f $log ]] && grep -q "attempt 1: .*requeueing" "$log" && ! grep -q "attempt 2 " "$log"; then
    between=1
    [[ -f $work/fault_once ]] || fail "the first attempt failed, but not by the injected fault (no $work/fault_once)"
    ls "$run" > "$work/between.ls"
    cp "$run/metrics.jsonl" "$work/between.metrics.jsonl" 2>/dev/null || : > "$work/between.metrics.jsonl"
    [[ -f $run/step_000002/COMPLETE ]] || fail "after the fault at step 3 there is no complete checkpoint step_000002" \
      "(run dir: $(tr '\n' ' ' < "$work/between.ls"); checkpoint every 2 steps: set it in the config or DICE_SLURM_TEST_ARGS)"
    stat -c '%i %Y' "$run/step_000002/COMPLETE" > "$work/between.ckpt2.stat"
    echo "between attempts: $(tr '\n' ' ' < "$work/between.ls")"
  fi
  sleep 0.5
done
[[ $state == COMPLETED ]] || fail "job $job ended as '${state:-unknown}' (waited up to ${wait_s}s)"
((between)) || fail "never saw the job between its two attempts (did the first attempt fail and requeue?)"

echo "== checks"
info=$(scontrol show job -o "$job")
[[ $info == *" Restarts=1 "* ]] || fail "job restarted $(grep -o 'Restarts=[0-9]*' <<< "$info"), expected once"
[[ $info == *" ExitCode=0:0 "* ]] || fail "job $(grep -o 'ExitCode=[0-9:]*' <<< "$info"), expected 0:0"
[[ $(grep -c "^dice-$sub: job $job attempt [0-9]* (" "$log") -eq 2 ]] || fail "the log does not show exactly two attempts"
grep -q "^dice-$sub: job $job attempt 1: dice exited with status [1-9][0-9]*; requeueing" "$log" \
  || fail "the log does not show attempt 1 failing and requeueing"
grep -q "^dice-$sub: job $job attempt 2: finished" "$log" || fail "the log does not show attempt 2 finishing"
[[ -f $run/config.yaml ]] || fail "no resolved config.yaml in the run dir"
final=$(printf 'step_%06d' "$steps")
[[ -f $run/$final/COMPLETE ]] || fail "the final checkpoint $final is missing or not COMPLETE"
if [[ -f $run/step_000002/COMPLETE ]]; then
  [[ $(stat -c '%i %Y' "$run/step_000002/COMPLETE") == $(cat "$work/between.ckpt2.stat") ]] \
    || fail "step_000002 was written again: the second attempt started over instead of resuming"
fi
python3 - "$work/between.metrics.jsonl" "$run/metrics.jsonl" "$steps" "$keys" <<'PY' || fail "metrics.jsonl"
import json, sys
def steps_of(path):
    out = []
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        missing = [k for k in sys.argv[4].split() if k not in rec]
        assert not missing, f"{path}:{n} lacks {missing}"
        out.append(rec["step"])
    return out
before, after, n = steps_of(sys.argv[1]), steps_of(sys.argv[2]), int(sys.argv[3])
assert before == [1, 2], f"before the resume metrics.jsonl held steps {before}, expected [1, 2]"
assert after == list(range(1, n + 1)), f"after the resume metrics.jsonl holds steps {after}, expected 1..{n} once each"
records = lambda path: [json.loads(l) for l in open(path) if l.strip()]
assert records(sys.argv[2])[:2] == records(sys.argv[1]), \
    "the records of steps 1-2 changed across the resume: the second attempt recomputed them instead of resuming"
print(f"metrics: steps 1..{n} once each (1..2 before the resume)")
PY
ok=1
echo "slurm_train_test: all passed ($sub, job $job: 2 attempts, launcher $launcher)"
