#!/usr/bin/env bash
# dice train on one GPU (after tools/gpu/build.sh): a random SDAR-1.7B-shaped model, colocated,
# (1) the CUDA judge on the built-in CUDA tasks for 3 steps, (2) the synthetic reward for 2 steps
# (updates happen; the actor's weights checked against the learner's each step: the job ends on a
# mismatch). Logs and metrics land in $OUT. PARTS="synth" (or "judge") runs only that one.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
dice=${DICE:-build-gpu/src/app/dice}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
work=/tmp/dice-gpu; mkdir -p "$work"
[[ -f $work/sdar-1.7b-random/config.json ]] ||
  "$dice" ckpt init --config configs/models/sdar-1.7b.yaml --out "$work/sdar-1.7b-random" --seed 1 | tail -1
parts=${PARTS:-judge synth}
metrics=()
if [[ $parts == *judge* ]]; then
  echo "#### judge reward (exec), 3 steps"
  rm -rf "$work/judge"
  timeout 300 mpirun -np 1 "$dice" train -c configs/train/gpu_smoke.yaml --out "$work/judge" ${JUDGE_SETS:-} 2>&1 | tail -12
  cp "$work/judge/metrics.jsonl" "$OUT/metrics_judge.jsonl" 2>/dev/null
  metrics+=("$OUT/metrics_judge.jsonl")
fi
if [[ $parts == *synth* ]]; then
  echo "#### synthetic reward, 2 steps (updates)"
  rm -rf "$work/synth"
  timeout 240 mpirun -np 1 "$dice" train -c configs/train/gpu_smoke.yaml --out "$work/synth" --set reward.kind=synthetic_token_share \
    --set 'stages=[{name: e2e, kind: end_to_end, steps: 2, tasks: configs/tasks/builtin_cuda.jsonl, max_prompt_len: 2000}]' \
    --set optim.lr=1.0e-5 --set dist.checksum_weights=true 2>&1 | tail -8
  cp "$work/synth/metrics.jsonl" "$OUT/metrics_synth.jsonl" 2>/dev/null
  metrics+=("$OUT/metrics_synth.jsonl")
fi
python3 - "${metrics[@]}" <<'PY'
import json, sys
for p in sys.argv[1:]:
    try: recs = [json.loads(l) for l in open(p)]
    except OSError: print(p, "missing"); continue
    for r in recs:
        t = {k[5:-2]: round(v, 2) for k, v in r.items() if k.startswith("time_")}
        print(p.split("/")[-1], "step", r["step"], "reward", round(r.get("reward_mean", 0), 3), "kept", r.get("kept_samples"),
              "judged", r.get("judged"), "failures", r.get("failures"), "loss", r.get("loss"), "gnorm", r.get("grad_norm"),
              "logp_gap", r.get("logp_gap_mean"), "tok/s", round(r.get("sample_tokens_per_s", 0)), "times", t,
              "checksums", r["checksums"])
PY
