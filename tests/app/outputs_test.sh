#!/usr/bin/env bash
# Outputs users can trust (issue 14): each scenario is a user's mistake, and asserts the clear
# error (rc 2 and a sentence) or the kept data. One CTest per scenario (tests/app/CMakeLists.txt):
#   fingerprint  a second checkpoint / other settings into the same eval --out; a failing run
#                leaves config.yaml alone; --fresh / --continue-anyway
#   too_long     one prompt over sampler.max_len among good ones: a failure record naming the task
#   lock         two runs into one directory; a lock left by a killed run is taken over
#   out_checks   --out in a missing folder / onto a file / read-only / already there, before any work
#   replace      re-export and re-init onto a full tmpfs keep the old model; import-hf onto step_N
#   incomplete   a checkpoint without its COMPLETE marker, given to eval, export-hf and sample
#   values       bad values and misleading messages (items 7-9 of the issue)
#   train        dice train into a locked run directory / one started from another model
#   signal       SIGTERM during ckpt init --replace: no staging folder left, the old model kept;
#                SIGTERM during dice judge: no dice_judge_* scratch folder left; SIGTERM mid-build:
#                the sandboxed build ends with dice (no process left, nothing written after)
# usage: outputs_test.sh DICE_BINARY SOURCE_DIR SCENARIO
set -uo pipefail
dice=$1
src=$2
scenario=$3
work=$(mktemp -d /tmp/dice_outputs_test.XXXXXX)
chmod 755 "$work"  # the judge sandbox runs candidates as another uid
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_error "sentence part" cmd...: rc 2 and the sentence on stderr, no "internal error".
expect_error() {
  local want=$1; shift
  "$@" > "$work/err.log" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] || { cat "$work/err.log"; fail "rc $rc (want 2) from: $*"; }
  grep -qF -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "no '$want' from: $*"; }
  ! grep -q "internal error" "$work/err.log" || { cat "$work/err.log"; fail "internal error from: $*"; }
  echo "  ok (rc 2): $(grep 'error' "$work/err.log" | tail -1 | cut -c1-160)"
}
run_ok() { "$@" > "$work/ok.log" 2>&1 || { cat "$work/ok.log"; fail "failed: $*"; }; }

cd "$work"
"$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out model --seed 3 > /dev/null 2>&1 || fail "ckpt init"
head -n 2 "$src/configs/tasks/builtin_cpu.jsonl" > two.jsonl
eval_args=(--tasks two.jsonl --set sampler.max_new_tokens=8 --set "judge.cache_root=$work/cache" --set plots=false)

case $scenario in
fingerprint)
  echo "== a second checkpoint into the same --out is refused, naming the checkpoint"
  run_ok "$dice" eval --checkpoint model "${eval_args[@]}" --out res
  cp res/samples.jsonl before.jsonl
  cp res/config.yaml config.before
  "$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out model2 --seed 4 > /dev/null 2>&1 || fail "init 2"
  expect_error "holds results made differently: checkpoint" "$dice" eval --checkpoint model2 "${eval_args[@]}" --out res
  grep -qF "$work/model2" "$work/err.log" || fail "the sentence does not name the new checkpoint's path"
  cmp -s before.jsonl res/samples.jsonl || fail "the refused run changed samples.jsonl"
  echo "== other sampler settings are refused, naming the key and both values"
  expect_error "config.sampler.temperature ('0" "$dice" eval --checkpoint model "${eval_args[@]}" --temperature 1 --out res
  echo "== a run that fails on a typo leaves config.yaml alone"
  expect_error "unknown config key 'sampler.tempreature'" "$dice" eval --checkpoint model "${eval_args[@]}" \
    --set sampler.tempreature=1 --out res
  cmp -s config.before res/config.yaml || fail "config.yaml was rewritten by a failing run"
  echo "== the same settings resume; result-neutral keys (chunk) resume too"
  run_ok "$dice" eval --checkpoint model "${eval_args[@]}" --set chunk=1 --out res
  grep -q "2 already judged, 0 to do" ok.log || { cat ok.log; fail "same fingerprint did not resume"; }
  echo "== --continue-anyway keeps the old records; --fresh starts over with the new checkpoint"
  run_ok "$dice" eval --checkpoint model2 "${eval_args[@]}" --out res --continue-anyway
  grep -q "2 already judged" ok.log || fail "--continue-anyway did not keep the records"
  run_ok "$dice" eval --checkpoint model2 "${eval_args[@]}" --out res --fresh
  grep -q "0 already judged, 2 to do" ok.log || { cat ok.log; fail "--fresh did not start over"; }
  grep -q "model2" res/samples.jsonl || fail "--fresh records do not name the new checkpoint"
  ! grep -q "\"$work/model\"" res/samples.jsonl || fail "old records survived --fresh"
  expect_error "contradict" "$dice" eval --checkpoint model "${eval_args[@]}" --out res --fresh --continue-anyway
  ;;
too_long)
  echo "== one prompt over sampler.max_len among good ones"
  python3 - "$src/configs/tasks/builtin_cpu.jsonl" <<'PY'
import json, sys
ts = [json.loads(l) for l in open(sys.argv[1])][:2]
big = dict(ts[0]); big["id"] = "huge_task"; big["reference"] += "\n# padding\n" * 3000
open("long.jsonl", "w").write("".join(json.dumps(t) + "\n" for t in [ts[0], big, ts[1]]))
PY
  args=(--checkpoint model --tasks long.jsonl --set sampler.max_new_tokens=8 --set sampler.max_len=2048
        --set "judge.cache_root=$work/cache" --set plots=false --out res)
  run_ok "$dice" eval "${args[@]}"
  grep -q "task 'huge_task': the prompt has" ok.log || { cat ok.log; fail "no warning naming the task"; }
  python3 - <<'PY' || fail "records"
import json
rs = {r["task_id"]: r for r in map(json.loads, open("res/samples.jsonl"))}
assert len(rs) == 3, rs.keys()
h = rs["huge_task"]
assert h["verdict"]["failure"] == "resource_limit" and "sampler.max_len" in h["not_run"], h
assert all(r["response_tokens"] > 0 for k, r in rs.items() if k != "huge_task")
print("  ok: 3 records, huge_task recorded as", h["verdict"]["failure"])
PY
  run_ok "$dice" eval "${args[@]}"
  grep -q "3 already judged, 0 to do" ok.log || { cat ok.log; fail "the resume redoes the failed item"; }
  ;;
lock)
  echo "== two runs into one directory: the second is refused with the holder's host and pid"
  long=(--checkpoint model --tasks "$src/configs/tasks/builtin_cpu.jsonl" --set "judge.cache_root=$work/cache"
        --set plots=false --set sampler.max_len=4096 --out res)
  "$dice" eval "${long[@]}" --set sampler.max_new_tokens=2048 > first.log 2>&1 &
  first=$!
  for _ in $(seq 600); do
    grep -q "pid $first" res/.dice.lock 2>/dev/null && break
    kill -0 $first 2>/dev/null || break
    sleep 0.2
  done
  grep -q "pid $first" res/.dice.lock || { kill -9 $first; cat first.log; fail "the first run never took the lock"; }
  expect_error "is in use by another dice run (host $(hostname), pid $first)" "$dice" eval "${long[@]}" \
    --set sampler.max_new_tokens=2048
  echo "== the same for dice judge writing a file another process has locked"
  printf '{"task_id": "builtin_cpu_001_add", "response": "no code"}\n' > cands.jsonl
  python3 -c "import fcntl, time; f = open('v.jsonl.lock', 'w'); f.write('host h, pid 1\n'); f.flush(); fcntl.flock(f, fcntl.LOCK_EX); open('held', 'w').close(); time.sleep(120)" &
  holder=$!
  for _ in $(seq 300); do [[ -e held ]] && break; sleep 0.1; done
  expect_error "is in use by another dice run (host h, pid 1)" "$dice" judge --tasks two.jsonl --candidates cands.jsonl \
    --out v.jsonl --set "cache_root=$work/cache"
  kill $holder
  echo "== kill -9 of the first run: its lock is taken over"
  kill -9 $first; wait $first 2>/dev/null
  run_ok "$dice" eval "${long[@]}" --set sampler.max_new_tokens=8 --fresh
  grep -q "taking over the lock" ok.log || { cat ok.log; fail "no takeover message"; }
  python3 -c "import json; n=sum(1 for _ in open('res/samples.jsonl')); assert n == 34, n" || fail "records after takeover"
  ;;
out_checks)
  printf '{"task_id": "builtin_cpu_001_add", "response": "no code"}\n' > cands.jsonl
  echo hello > prompts.txt
  echo "== --out in a missing folder: refused before any work, nothing left"
  expect_error "does not exist; create it first, before any work" "$dice" judge --tasks two.jsonl --candidates cands.jsonl \
    --out missing/v.jsonl --set "cache_root=$work/cache"
  expect_error "does not exist; create it first, before any work" "$dice" sample --model model --prompts prompts.txt \
    --out missing/s.jsonl --set sampler.max_new_tokens=4
  [[ ! -e missing ]] || fail "a missing folder was created"
  ! grep -q "judge: 0/\|sample: loaded" err.log || fail "work was done before the check"
  echo "== eval --out onto a file"
  expect_error "is a file, not a folder" "$dice" eval --checkpoint model "${eval_args[@]}" --out prompts.txt
  echo "== an existing --out is kept unless --overwrite"
  run_ok "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out v.jsonl --set "cache_root=$work/cache"
  cp v.jsonl v.before
  expect_error "already exists; pass --overwrite" "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out v.jsonl \
    --set "cache_root=$work/cache"
  cmp -s v.before v.jsonl || fail "v.jsonl changed"
  run_ok "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out v.jsonl --set "cache_root=$work/cache" --overwrite
  ls v.jsonl.* 2>/dev/null && fail "leftovers beside v.jsonl (.tmp/.partial/.lock)"
  run_ok "$dice" sample --model model --prompts prompts.txt --out s.jsonl --set sampler.max_new_tokens=4
  [[ $(wc -l < s.jsonl) -eq 1 ]] || fail "sample output"
  ls s.jsonl.* 2>/dev/null && fail "leftovers beside s.jsonl"
  echo "== a read-only folder (a read-only tmpfs mount)"
  mkdir ro
  if mount -t tmpfs -o ro,size=1m tmpfs ro 2>/dev/null; then
    mounts+=("$work/ro")
    expect_error "Read-only file system" "$dice" eval --checkpoint model "${eval_args[@]}" --out ro/res
    expect_error "is not writable" "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out ro/v.jsonl \
      --set "cache_root=$work/cache"
  else
    echo "  (cannot mount a tmpfs here: read-only case not checked)"
  fi
  ;;
replace)
  echo "== import-hf onto an existing step_N is refused unless --replace"
  run_ok "$dice" ckpt import-hf --hf model --out run
  expect_error "already holds run/step_000000; pass --replace" "$dice" ckpt import-hf --hf model --out run
  run_ok "$dice" ckpt import-hf --hf model --out run --replace
  echo "== export-hf onto an existing model is refused unless --replace"
  run_ok "$dice" ckpt export-hf --checkpoint run --out exp
  expect_error "already holds a model; pass --replace" "$dice" ckpt export-hf --checkpoint run --out exp
  echo "== a re-export onto a full tmpfs keeps the old model"
  mkdir full
  mount -t tmpfs -o size=140m tmpfs full || fail "cannot mount a tmpfs (needs root)"
  mounts+=("$work/full")
  run_ok "$dice" ckpt export-hf --checkpoint run --out full/hf
  echo "my notes" > full/hf/README.md
  (cd full/hf && sha256sum model.safetensors config.json tokenizer.json > "$work/sums")
  wbytes=$(stat -c %s full/hf/model.safetensors)
  free=$(df -B1 --output=avail full | tail -1)
  # room for the new weights but not for the tokenizer copy: the write fails part-way
  head -c $((free - wbytes - 1048576)) /dev/zero > full/filler
  expect_error "the old folder is kept as it was" "$dice" ckpt export-hf --checkpoint run --out full/hf --replace
  (cd full/hf && sha256sum -c --quiet "$work/sums") || fail "the old model changed"
  [[ $(cat full/hf/README.md) == "my notes" ]] || fail "README lost"
  ls full | grep -q tmp && fail "staging folder left on the full disk"
  echo "== with less room than the weights it is refused before any work"
  rm full/filler; head -c $((free - 1048576)) /dev/zero > full/filler
  expect_error "bytes free, but the new model needs" "$dice" ckpt export-hf --checkpoint run --out full/hf --replace
  (cd full/hf && sha256sum -c --quiet "$work/sums") || fail "the old model changed"
  echo "== a re-init onto the full tmpfs keeps the old model"
  rm full/filler; head -c $((free - wbytes - 1048576)) /dev/zero > full/filler
  expect_error "The old folder is kept as it was" "$dice" ckpt init --config "$src/configs/models/tiny.yaml" \
    --out full/hf --seed 5 --replace
  (cd full/hf && sha256sum -c --quiet "$work/sums") || fail "the old model changed"
  echo "== with room, --replace replaces it (README carried over)"
  rm full/filler
  run_ok "$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out full/hf --seed 5 --replace
  (cd full/hf && ! sha256sum -c --quiet "$work/sums" > /dev/null 2>&1) || fail "the model was not replaced"
  [[ $(cat full/hf/README.md) == "my notes" ]] || fail "README lost on replace"
  ;;
incomplete)
  echo "== a checkpoint without its COMPLETE marker"
  run_ok "$dice" ckpt import-hf --hf model --out run
  rm run/step_000000/COMPLETE
  expect_error "no COMPLETE marker" "$dice" eval --checkpoint run/step_000000 "${eval_args[@]}" --out res
  expect_error "no COMPLETE marker" "$dice" ckpt export-hf --checkpoint run/step_000000 --out exp
  echo hello > prompts.txt
  expect_error "no COMPLETE marker" "$dice" sample --model run/step_000000 --prompts prompts.txt --out s.jsonl
  expect_error "neither a model folder" "$dice" eval --checkpoint run "${eval_args[@]}" --out res
  [[ ! -e exp && ! -e s.jsonl ]] || fail "outputs written from an incomplete checkpoint"
  ;;
values)
  echo hello > prompts.txt
  s=(sample --model model --prompts prompts.txt --out s.jsonl --set sampler.max_new_tokens=4)
  expect_error "must be auto, cpu, cuda or cuda:N" "$dice" "${s[@]}" --device bogus
  if ! nvidia-smi -L > /dev/null 2>&1; then
    expect_error "no CUDA device is visible" "$dice" "${s[@]}" --device cuda
  fi
  expect_error "fp16 not in" "$dice" "${s[@]}" --dtype fp16
  expect_error "--model /nonexistent does not exist" "$dice" sample --model /nonexistent --prompts prompts.txt --out s.jsonl
  expect_error "--samples must be >= 1" "$dice" eval --checkpoint model "${eval_args[@]}" --out res --samples -3
  expect_error "--temperature must be >= 0" "$dice" eval --checkpoint model "${eval_args[@]}" --out res --temperature -2
  [[ ! -e res ]] || fail "a refused eval created its --out"
  printf 'sampler:\n  steps: 2\nplots: false\nsampler:\n  temperature: 1\n' > dup.yaml
  expect_error "key 'sampler' appears twice (lines 1 and 4)" "$dice" eval -c dup.yaml --checkpoint model --tasks two.jsonl --out res
  printf '{"task_id": "builtin_cpu_001_add", "response": "x"}\n' > cands.jsonl
  expect_error "not a verdict" "$dice" tasks metrics two.jsonl cands.jsonl
  t=(ckpt init --config "$src/configs/models/tiny.yaml" --out m2)
  expect_error "is smaller than the tokenizer's" "$dice" "${t[@]}" --set model.vocab_size=1000
  expect_error "is an ordinary token of the tokenizer" "$dice" "${t[@]}" --set model.mask_token_id=100
  expect_error "bytes of memory at once" "$dice" "${t[@]}" --set model.hidden_size=60000 --set model.num_hidden_layers=1
  [[ ! -e m2 ]] || fail "a refused init left m2"
  run_ok "$dice" --version
  grep -q "commit .*build" "$work/ok.log" && grep -q "LibTorch [0-9]" "$work/ok.log" || { cat "$work/ok.log"; fail "dice --version"; }
  expect_error "--log-level is 'loud'" "$dice" --log-level loud judge --help
  run_ok "$dice" judge --tasks two.jsonl --candidates cands.jsonl --set "cache_root=$work/cache" --out lv.jsonl --log-level warn
  ! grep -q "^judge: " "$work/ok.log" || { cat "$work/ok.log"; fail "--log-level warn still printed info lines"; }
  # --print-config prints what would run and runs nothing
  for c in "train -c $src/configs/train/quickstart.yaml" "sft -c $src/configs/sft/quickstart.yaml"; do
    run_ok "$dice" $c --model model --out pc --print-config
    grep -q "^out: .*pc" "$work/ok.log" || { cat "$work/ok.log"; fail "dice $c --print-config printed no config"; }
    [[ ! -e pc ]] || fail "dice $c --print-config started a run (pc exists)"
  done
  # a config that includes another: the 8B one states only what differs from the 1.7B one
  run_ok "$dice" train -c "$src/configs/train/sdar-8b-bicrl.yaml" --print-config
  for want in "zero1: true" "checkpoint_layers: -1" "max_new_tokens: 4096" "out: runs/sdar-8b"; do
    grep -q "$want" "$work/ok.log" || { cat "$work/ok.log"; fail "sdar-8b-bicrl.yaml resolves without '$want'"; }
  done
  run_ok "$dice" eval --checkpoint model "${eval_args[@]}" --out pc --print-config
  grep -q "^out: .*pc" "$work/ok.log" && [[ ! -e pc ]] || fail "dice eval --print-config ran the evaluation"
  j=(judge --tasks two.jsonl --candidates cands.jsonl --set "cache_root=$work/cache")
  expect_error "judge.compile_workers must be >= 0 (0 = auto)" "$dice" "${j[@]}" --out v.jsonl --set compile_workers=-1
  run_ok "$dice" "${j[@]}" --out v.jsonl --set judge.compile_workers=1  # the key as the message names it
  expect_error "judge.max_jobs must be >= 1" "$dice" "${j[@]}" --out v2.jsonl --set judge.max_jobs=-1
  expect_error "judge.plausible_speedup must be > 1" "$dice" "${j[@]}" --out v2.jsonl --set judge.plausible_speedup=0.5
  expect_error "unknown config key" "$dice" "${j[@]}" --out v2.jsonl --set judge.timing_input_sets=0  # every call has fresh inputs now
  expect_error "'frobnicate' is not a dice command" "$dice" frobnicate
  expect_error "is a file; pass a checkpoint folder" "$dice" ckpt info prompts.txt
  expect_error "config key 'device' is 'cuda:x', but must be one of" "$dice" eval --checkpoint model "${eval_args[@]}" \
    --out res --set device=cuda:x
  if ! nvidia-smi -L > /dev/null 2>&1; then
    expect_error "eval.device is 'cuda' but no CUDA device is visible" "$dice" eval --checkpoint model "${eval_args[@]}" \
      --out res --set device=cuda
  fi
  ;;
signal)
  # SIGTERM (what Slurm and mpirun send; a background job of a script ignores SIGINT, so Ctrl-C's
  # SIGINT takes the same handler but cannot be sent from here)
  echo "== SIGTERM during a re-init: the staging folder is removed, the old model kept"
  (cd model && sha256sum model.safetensors config.json > "$work/sums")
  wait_for() {  # GLOB PID: until a path matches GLOB (true) or PID ends or 100 s pass (false)
    for _ in $(seq 2000); do
      compgen -G "$1" > /dev/null && return 0
      kill -0 "$2" 2>/dev/null || return 1
      sleep 0.05
    done
    return 1
  }
  "$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out model --seed 9 --replace --set model.hidden_size=1024 \
    --set model.intermediate_size=4096 --set model.num_hidden_layers=8 > init.log 2>&1 &
  pid=$!
  wait_for "model.tmp.*" $pid || { cat init.log; fail "the staging folder never appeared"; }
  kill -TERM $pid
  wait $pid
  rc=$?
  [[ $rc -eq 143 ]] || { cat init.log; fail "rc $rc (want 143: ended by SIGTERM)"; }
  compgen -G "model.tmp.*" > /dev/null && fail "the staging folder was left behind: $(ls -d model.tmp.*)"
  (cd model && sha256sum -c --quiet "$work/sums") || fail "the old model changed"
  echo "  ok: ended by SIGTERM, no staging left, old model intact"
  echo "== SIGTERM during dice judge: its dice_judge_* scratch folder is removed"
  mkdir tmp && chmod 755 tmp
  python3 -c "import json; t = json.loads(open('two.jsonl').readline()); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > cands.jsonl
  TMPDIR=$work/tmp "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out verdicts.jsonl > judge.log 2>&1 &
  pid=$!
  wait_for "tmp/dice_judge_*/exec0_*" $pid  # scratch made, a candidate process started
  compgen -G "tmp/dice_judge_*" > /dev/null || { cat judge.log; fail "the judge's scratch folder never appeared"; }
  kill -TERM $pid
  wait $pid
  rc=$?
  [[ $rc -eq 143 ]] || { cat judge.log; fail "dice judge: rc $rc (want 143: ended by SIGTERM)"; }
  compgen -G "tmp/dice_judge_*" > /dev/null && fail "the judge's scratch folder was left behind: $(ls -d tmp/dice_judge_*)"
  echo "  ok: ended by SIGTERM, no dice_judge_* folder left"
  echo "== SIGTERM while a sandboxed build runs: the build ends with dice, nothing is written after"
  # an empty cache: the candidate's extension must be built (tens of seconds on this machine)
  mkdir cache_sig && chmod 755 cache_sig
  TMPDIR=$work/tmp "$dice" judge --tasks two.jsonl --candidates cands.jsonl --out verdicts_sig.jsonl \
    --set cache_root="$work/cache_sig" --set precompiled_header=false > judge_sig.log 2>&1 &
  pid=$!
  wait_for "tmp/dice_judge_*/build*" $pid || { cat judge_sig.log; fail "no sandboxed build started"; }
  sleep 1
  kill -TERM $pid
  wait $pid
  rc=$?
  [[ $rc -eq 143 ]] || { cat judge_sig.log; fail "dice judge (building): rc $rc (want 143: ended by SIGTERM)"; }
  sleep 0.5
  # no process of the judge's is left: each sandboxed one has TMPDIR in its (removed) scratch (its
  # working directory shows as "/" from here: it has a mount namespace of its own)
  left=""
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -q "^TMPDIR=$work/tmp/" || continue
    left+=" ${p#/proc/}($(tr '\0' ' ' 2>/dev/null < "$p/cmdline" | cut -c1-80))"
  done
  [[ -z $left ]] || fail "processes of the killed judge still run:$left"
  sleep 2
  compgen -G "tmp/dice_judge_*" > /dev/null && fail "a scratch folder is left or written again after the judge ended: $(find tmp | head)"
  echo "  ok: ended by SIGTERM mid-build, no process left, nothing written after"
  ;;
train)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  train=(mpirun -np 1 --oversubscribe "$dice" train -c "$src/tests/train/train_test.yaml" --model model --out run)
  echo "== dice train into a run directory another run holds"
  mkdir run
  python3 -c "import fcntl, time; f = open('run/.dice.lock', 'w'); f.write('host h, pid 1\n'); f.flush(); fcntl.flock(f, fcntl.LOCK_EX); open('held', 'w').close(); time.sleep(120)" &
  holder=$!
  for _ in $(seq 300); do [[ -e held ]] && break; sleep 0.1; done
  expect_error "the run directory run is in use by another dice run (host h, pid 1)" "${train[@]}" --resume auto
  kill $holder; wait $holder 2>/dev/null
  echo "== resuming a run directory that was started from another model"
  run_ok "$dice" ckpt import-hf --hf model --out run
  printf '{"model": "0123456789abcdef", "about.model": "/models/other"}\n' > run/fingerprint.json
  expect_error "was started from another model: model ('/models/other'" "${train[@]}" --resume auto
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "outputs_test $scenario: passed"
