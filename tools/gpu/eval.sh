#!/usr/bin/env bash
# dice eval on the GPU node through mpirun, on 1 and on 2 GPUs (when the node has 2):
#  1. a random tiny checkpoint on the built-in CUDA task set (Exec 0, honestly), responses equal
#     between 1 and 2 ranks;
#  2. the built-in honest CUDA solutions fed as responses, timed (Exec 100; fast_1 from live timing).
# usage: tools/gpu/eval.sh WORK_DIR   (repo root, project built in build-gpu/)
set -uo pipefail
cd "$(dirname "$0")/../.."
work=${1:-/tmp/dice-gpu/eval}
dice=${DICE:-build-gpu/src/app/dice}
mkdir -p "$work" && chmod 755 "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4
ngpu=$(nvidia-smi -L | wc -l)
workers=${EVAL_WORKERS:-$(nproc)}
common=(--set "judge.cache_root=$work/cache" --set "judge.compile_workers=$workers" --set judge.python=python3)
# EVAL_SETS: extra overrides, e.g. a sandbox setting `dice doctor` recommends (tools/gpu/doctor.sh)
for s in ${EVAL_SETS:-}; do common+=(--set "$s"); done
NEW=${EVAL_NEW:-512}
PARTS=" ${EVAL_PARTS:-random solutions} "  # EVAL_PARTS="solutions" runs only the honest-solutions part
nps="1 $([[ $ngpu -ge 2 ]] && echo 2)"
[[ $PARTS == *" random "* ]] || nps=""
[[ -n $nps ]] && "$dice" ckpt init --config configs/models/tiny.yaml --out "$work/model" --seed 7 > /dev/null
for np in $nps; do
  echo "=== random tiny checkpoint, builtin CUDA tasks, mpirun -np $np"
  mpirun --allow-run-as-root -np "$np" "$dice" eval --checkpoint "$work/model" --tasks configs/tasks/builtin_cuda.jsonl \
    --out "$work/random_np$np" --set sampler.max_new_tokens=$NEW "${common[@]}" > "$work/random_np$np.log" 2>&1
  grep -vE "^eval [0-9]+/" "$work/random_np$np.log" | tail -14
done
if [[ $ngpu -ge 2 && -n $nps ]]; then
  python3 - "$work/random_np1" "$work/random_np2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/samples.jsonl")]
b = [json.loads(l) for l in open(sys.argv[2] + "/samples.jsonl")]
same = sum(x["response"] == y["response"] for x, y in zip(a, b))
print(f"random model: {same}/{len(a)} responses identical between 1 and 2 GPUs")
PY
fi
nps="1 $([[ $ngpu -ge 2 ]] && echo 2)"
[[ $PARTS == *" solutions "* ]] || nps=""
for np in $nps; do
  echo "=== honest CUDA solutions as responses, timed, mpirun -np $np"
  mpirun --allow-run-as-root -np "$np" "$dice" eval --use-solutions --tasks configs/tasks/builtin_cuda.jsonl \
    --out "$work/solutions_np$np" --set judge.timing=true "${common[@]}" 2>&1 | while IFS= read -r l; do
      printf '%s %s\n' "$(date +%T)" "$l"; done > "$work/solutions_np$np.log"  # timestamped, kept whole
  grep -vE " eval [0-9]+/" "$work/solutions_np$np.log" | tail -14; grep -E " eval [0-9]+/" "$work/solutions_np$np.log" | tail -4
done
python3 - "$work" <<'PY'
import json, sys, glob
for d in sorted(glob.glob(sys.argv[1] + "/solutions_np*/samples.jsonl")):
    bad = [json.loads(l) for l in open(d)]
    bad = [(r["task_id"], r["verdict"]["failure"], r["verdict"]["log_tail"][-300:]) for r in bad if not r["verdict"]["correct"]]
    print(d, "not correct:", len(bad))
    for b in bad[:5]:
        print("  ", b)
PY
