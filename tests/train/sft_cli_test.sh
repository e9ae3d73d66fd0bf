#!/usr/bin/env bash
# `dice sft` end to end on the CPU with real MPI ranks and a tiny random model (Qwen3 vocabulary,
# the real tokenizer).
#
#   sft_cli_test.sh DICE SOURCE_DIR SCENARIO
#
# Scenarios (one CTest each):
#   learn   the built-in CPU tasks' solutions (format tasks), -np 2: the mean CE over masked tokens
#           of the last two steps is below 0.8 x step 1's (the masked tokens differ each step, so
#           the figure is noisy; measured 2026-12-01 with seeds 1 / 2 / 3: 0.70 / 0.72 / 0.72 x,
#           e.g. 11.94 11.79 10.89 9.52 8.78 7.86); its checkpoint has stage sft, its curves are
#           drawn, and one `dice train` step starts from it.
#   ranks   -np 1 and -np 2 on the same data: every step's loss, CE and gradient norm agree to 1e-5
#           (the update does not depend on how examples are spread over ranks); -np 2 with the
#           AdamW state sharded (optim.zero1) equals -np 2 without, bit for bit.
#   resume  with ZeRO-1 over 2 ranks: a run cut after step 2 (--steps 2) and continued with
#           --resume auto equals an uninterrupted 4-step run bit for bit (loss, CE, gradient norm,
#           lr of every step), also past a metrics record cut short; the checkpoint holds one
#           optimizer shard per rank. The resumed run's TensorBoard events and timed metrics are
#           read back; its checkpoint is exported (export-hf, whole and sharded) and checked by
#           readers that are not dice's.
#   refuse  bad setups are refused before any work, each with a sentence.
set -euo pipefail
dice=${1:?usage: sft_cli_test.sh DICE SOURCE_DIR SCENARIO}
src=$(cd "${2:?}" && pwd)
scenario=${3:?}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/dice_sft_test.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=${DICE_PYTHON:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out "$work/model" --seed 1 > /dev/null
# Remote code, as SDAR's HF folders ship it (config.json names it in auto_map): checkpoints and
# exports carry it, so an export loads with transformers' trust_remote_code.
echo "# configuration (test stand-in)" > "$work/model/configuration_sdar.py"
echo "# modeling (test stand-in)" > "$work/model/modeling_sdar.py"
"$py" -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['auto_map'] = {'AutoConfig': 'configuration_sdar.SDARConfig', 'AutoModelForCausalLM': 'modeling_sdar.SDARForCausalLM'}; json.dump(c, open(p, 'w'), indent=2)" "$work/model/config.json"
# Short pairs: 12 examples of a few dozen tokens.
"$py" - "$work/pairs.jsonl" <<'EOF'
import json, sys
ops = ["relu", "sigmoid", "tanh", "add", "mul", "sub", "exp", "log", "abs", "neg", "sqrt", "square"]
with open(sys.argv[1], "w") as f:
    for i, op in enumerate(ops):
        body = f"torch::Tensor {op}_forward(torch::Tensor x) {{ return x.{op}(); }}"
        f.write(json.dumps({"prompt": f"Write ModelNew computing {op} of x.",
                            "response": f"```python\ncpp = '{body}'\n```"}) + "\n")
EOF

run() {  # run NP OUT [dice sft args...]
  local np=$1 out=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$dice" sft -c "$src/configs/sft/quickstart.yaml" --model "$work/model" --out "$out" "$@"
}
pairs=(--data "$work/pairs.jsonl" --set data.format=pairs --set data.max_tokens=256 --set optim.examples_per_step=4
       --set epochs=2 --set optim.lr=0.005)

# compare A B TOLERANCE: every step's figures, relative tolerance (0 = bit for bit).
compare() {
  "$py" - "$1" "$2" "$3" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    for k in ("loss", "ce_masked", "grad_norm", "lr", "masked_tokens", "label_tokens"):
        if tol == 0:
            assert x[k] == y[k], f"step {x['step']} {k}: {x[k]!r} != {y[k]!r}"
        else:
            assert abs(x[k] - y[k]) <= tol * max(abs(x[k]), 1e-12), f"step {x['step']} {k}: {x[k]!r} vs {y[k]!r}"
print(f"{len(a)} steps agree (tolerance {tol}):", [round(r["loss"], 6) for r in a])
EOF
}

case "$scenario" in
learn)
  run 2 "$work/learn" --set data.max_tokens=768 --steps 6 | tee "$work/learn.log"
  grep -q "^step 6/" "$work/learn.log" || fail "the run did not reach step 6"
  "$py" - "$work/learn/metrics.jsonl" <<'EOF'
import json, sys
r = [json.loads(l)["ce_masked"] for l in open(sys.argv[1])]
last = (r[-2] + r[-1]) / 2
print("ce_masked per step:", " ".join(f"{x:.3f}" for x in r), f"(last two / step 1 = {last / r[0]:.2f})")
assert len(r) == 6 and last < 0.8 * r[0], "the masked-token cross-entropy did not fall"
EOF
  [[ -f $work/learn/step_000006/COMPLETE ]] || fail "no checkpoint after the last step"
  [[ -s $work/learn/plots/loss.png && -s $work/learn/plots/lr.png ]] || fail "the run drew no loss / lr curves"
  "$dice" sft plot "$work/learn" --out "$work/replot" > "$work/replot.log"
  grep -q "loss.png" "$work/replot.log" && [[ -s $work/replot/loss.png ]] || fail "dice sft plot drew no loss curve"
  # RL starts from the SFT checkpoint (the pipeline: SFT, then BiC-RL).
  mpirun -np 1 "$dice" train -c "$src/tests/train/train_test.yaml" --model "$work/learn/step_000006" --out "$work/rl" \
    --steps 1 --set dist.colocated=true | tee "$work/rl.log"
  grep -q "^step 1/1" "$work/rl.log" || fail "dice train did not run a step from the SFT checkpoint"
  # The checkpoint is a model the rest of dice reads (eval, sample, train start from it).
  "$dice" ckpt info "$work/learn/step_000006" > "$work/info.log"
  grep -q "stage 'sft'" "$work/info.log" || fail "the checkpoint does not record stage sft"
  ;;
ranks)
  run 1 "$work/np1" "${pairs[@]}" > "$work/np1.log"
  run 2 "$work/np2" "${pairs[@]}" | tee "$work/np2.log"
  grep -q "^sft: 2 rank(s)" "$work/np2.log" || fail "the second run did not use 2 ranks"
  compare "$work/np1/metrics.jsonl" "$work/np2/metrics.jsonl" 1e-5
  run 2 "$work/np2z" "${pairs[@]}" --set optim.zero1=true > "$work/np2z.log"
  compare "$work/np2/metrics.jsonl" "$work/np2z/metrics.jsonl" 0
  ;;
resume)
  z=(--set optim.zero1=true)
  run 2 "$work/full" "${pairs[@]}" "${z[@]}" --steps 4 > "$work/full.log"
  run 2 "$work/cut" "${pairs[@]}" "${z[@]}" --steps 2 > "$work/cut.log"
  [[ -f $work/cut/step_000002/COMPLETE && ! -d $work/cut/step_000003 ]] || fail "expected exactly step_000002 after the cut"
  [[ -f $work/cut/step_000002/optim_rank0.h5 && -f $work/cut/step_000002/optim_rank1.h5 ]] ||
    fail "the ZeRO-1 checkpoint lacks one optimizer shard per rank"
  printf '{"step": 3, "loss": 1.2' >> "$work/cut/metrics.jsonl"  # a record cut short by a kill: dropped on resume
  run 2 "$work/cut" "${pairs[@]}" "${z[@]}" --steps 4 --resume auto | tee "$work/resume.log"
  grep -q "resuming from $work/cut/step_000002" "$work/resume.log" || fail "the rerun did not resume from step_000002"
  compare "$work/full/metrics.jsonl" "$work/cut/metrics.jsonl" 0
  # what a run shows: every record timed, its numbers in TensorBoard event files (read by a reader
  # of our own, not dice's), elapsed_s counted on across the resume
  "$py" "$src/tests/train/tfevents_check.py" "$work/cut" loss ce_masked grad_norm lr || fail "TensorBoard events"
  "$py" - "$work/cut/metrics.jsonl" <<'EOF'
import json, sys, time
r = [json.loads(l) for l in open(sys.argv[1])]
assert all(abs(x["time"] - time.time()) < 3600 for x in r), [x.get("time") for x in r]
e = [x["elapsed_s"] for x in r]
assert e == sorted(e) and e[0] >= 0, f"elapsed_s not counted on across the resume: {e}"
print("time and elapsed_s in every record:", e)
EOF
  # export-hf of the trained checkpoint (fp32 masters): bf16 as config.json says, remote code kept,
  # one file and sharded with an index; read back by readers that are not dice's (h5py, a
  # safetensors parser of the test's own), every tensor compared
  [[ -f $work/cut/step_000004/modeling_sdar.py ]] || fail "the checkpoint lacks the model's remote code"
  "$dice" ckpt export-hf --checkpoint "$work/cut" --out "$work/hf" > /dev/null
  "$py" "$src/tests/ckpt/export_hf_check.py" "$work/cut/step_000004" "$work/hf" || fail "export-hf"
  "$dice" ckpt export-hf --checkpoint "$work/cut" --out "$work/hf2" --max-shard-bytes 5000000 > /dev/null
  [[ -f $work/hf2/model.safetensors.index.json ]] || fail "a sharded export has no index"
  "$py" "$src/tests/ckpt/export_hf_check.py" "$work/cut/step_000004" "$work/hf2" || fail "sharded export-hf"
  "$dice" ckpt import-hf --hf "$work/hf2" --out "$work/back" > /dev/null || fail "dice cannot import its own export"
  ;;
refuse)
  expect_refusal() {  # expect_refusal PATTERN NP args...
    local pattern=$1 np=$2
    shift 2
    set +e
    out=$(timeout 120 mpirun -np "$np" --oversubscribe "$dice" sft -c "$src/configs/sft/quickstart.yaml" "$@" 2>&1)
    local rc=$?
    set -e
    ((rc != 0)) || fail "accepted: $*"
    grep -q -- "$pattern" <<< "$out" || { echo "$out"; fail "no sentence matching '$pattern' for: $*"; }
    grep -q "^step " <<< "$out" && fail "work started before the refusal: $*"
    echo "refused ($pattern): $*"
  }
  m=(--model "$work/model")
  expect_refusal "data.path /nonexistent.jsonl does not exist" 1 "${m[@]}" --out "$work/r1" --data /nonexistent.jsonl
  printf '{"prompt": "p", "response": "r"}\n{"prompt": "p"}\n' > "$work/bad.jsonl"
  expect_refusal "bad.jsonl:2: the record has no 'response' field" 2 "${m[@]}" --out "$work/r2" --data "$work/bad.jsonl" --set data.format=auto
  expect_refusal "is longer than 8 tokens" 1 "${m[@]}" --out "$work/r3" "${pairs[@]}" --set data.max_tokens=8
  expect_refusal "model is not set" 1 --out "$work/r4" --set model=
  expect_refusal "unknown config key 'optim.learning_rate'" 1 "${m[@]}" --out "$work/r5" --set optim.learning_rate=1
  expect_refusal "config key 'ckpt_every' is now 'ckpt.every' (as in dice train)" 1 "${m[@]}" --out "$work/r5b" --set ckpt_every=2
  expect_refusal "config key 'optim.bucket_mb' is now 'dist.bucket_mb'" 1 "${m[@]}" --out "$work/r5c" --set optim.bucket_mb=8
  # A resume with a config that changes results is refused, naming the key.
  run 1 "$work/r6" "${pairs[@]}" --steps 1 > /dev/null
  expect_refusal "recorded with a different config (optim.lr)" 1 "${m[@]}" --out "$work/r6" "${pairs[@]}" --set optim.lr=0.5
  # A rerun into that folder from another starting model is refused ...
  "$dice" ckpt init --config "$src/configs/models/tiny.yaml" --out "$work/other" --seed 2 > /dev/null
  expect_refusal "was started from another model" 1 --model "$work/other" --out "$work/r6" "${pairs[@]}"
  # ... and so is one on other examples (the same data.path, edited: the fingerprint holds their digest).
  cp "$work/pairs.jsonl" "$work/pairs.orig"
  echo '{"prompt": "one more", "response": "example"}' >> "$work/pairs.jsonl"
  expect_refusal "was started from other inputs: examples" 1 "${m[@]}" --out "$work/r6" "${pairs[@]}"
  mv "$work/pairs.orig" "$work/pairs.jsonl"
  # A ZeRO-1 checkpoint of 2 ranks cannot be resumed by 1.
  run 2 "$work/r7" "${pairs[@]}" --set optim.zero1=true --steps 1 > /dev/null
  expect_refusal "holds 2 optimizer shard(s); this run needs 1" 1 "${m[@]}" --out "$work/r7" "${pairs[@]}" \
    --set optim.zero1=true
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "PASS: sft $scenario"
