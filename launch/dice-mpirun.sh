#!/usr/bin/env bash
# Runs dice under mpirun with the settings a dice job wants on this machine.
# usage and options: launch/dice-mpirun.sh --help
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
root=$(cd "$(dirname "$self")/.." && pwd)

usage() {
  cat <<EOF
usage: launch/dice-mpirun.sh [-np N] [mpirun options...] [--gpu-bind rank|none] [--dry-run] -- DICE_ARGS...

Starts \`mpirun ... dice DICE_ARGS...\`, one rank per GPU where the node has GPUs.

  launch/dice-mpirun.sh -- train -c configs/train/x.yaml --out runs/x --resume auto   # every GPU here
  launch/dice-mpirun.sh -np 3 -- train -c configs/train/quickstart.yaml --out runs/q # CPU machine
  launch/dice-mpirun.sh -np 16 --hostfile hosts -- train ...                         # two 8-GPU nodes

Options (everything else before \`--\` goes to mpirun unchanged):
  -np N, -n N       ranks in all. Default: the GPUs of this node; on a machine without GPUs,
                    required (inside a Slurm allocation mpirun's own default, one per task, applies)
  --gpu-bind rank   (default) each rank sees only the GPU of its node-local rank: a per-rank shim
                    sets CUDA_VISIBLE_DEVICES to that one GPU (an entry of the launcher's
                    CUDA_VISIBLE_DEVICES when that is set), so no rank opens a context on another
                    rank's GPU and the judge's executors inherit the same single GPU
  --gpu-bind none   every rank sees every GPU; dice picks local rank mod visible GPUs itself
  --dry-run         print the mpirun command line and exit
  -h, --help        this text

What it sets (a value already in the environment wins):
  DICE_LOCAL_RANK       node-local rank, for every rank (OMPI_COMM_WORLD_LOCAL_RANK)
  OMP_NUM_THREADS       CPU cores of this node / ranks per node, at least 1
  NCCL_NVLS_ENABLE=0    NVLink multicast off unless the node sets it: on shared hosts a program
                        using it can take the host's GPUs out of service
  OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1   when run as root (containers, the GPU nodes)
  --bind-to none        unless you give --bind-to: the judge compiles and runs candidates on all
                        of the node's cores, and a rank pinned to one core would pin them too
  --oversubscribe       on machines without GPUs, where ranks may outnumber cores (CI: 3 ranks on 2)
  -x VAR                for OMP_*, NCCL_*, NVSHMEM_*, TORCH_*, CUDA_*, DICE_*, PATH, LD_LIBRARY_PATH,
                        so ranks on other nodes get them too

Environment: DICE_BIN (the dice binary; default $root/build/src/app/dice),
DICE_MPIRUN (the mpirun to use; default mpirun from PATH).
EOF
}

# Node-local GPUs as a list of CUDA_VISIBLE_DEVICES entries (empty: none).
node_gpus() {
  if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
    # Set but empty, or "-1"/"none": the launcher hid every GPU on purpose.
    [[ -z $CUDA_VISIBLE_DEVICES || $CUDA_VISIBLE_DEVICES == -1 || $CUDA_VISIBLE_DEVICES == none ]] && return 0
    tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES"
    return 0
  fi
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  ((n > 0)) && seq 0 $((n - 1))
  return 0
}

# Per-rank shim: mpirun starts `dice-mpirun.sh --rank-shim DICE ARGS...` on every rank; it narrows
# the GPUs this rank sees and execs dice (so signals and exit status are dice's own).
if [[ ${1:-} == --rank-shim ]]; then
  shift
  lr=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}
  export DICE_LOCAL_RANK=$lr
  if [[ ${DICE_GPU_BIND:-rank} == rank ]]; then
    mapfile -t gpus < <(node_gpus)
    if ((${#gpus[@]} > 0)); then
      if ((lr >= ${#gpus[@]})); then
        echo "dice-mpirun: [r${OMPI_COMM_WORLD_RANK:-?} $(hostname -s)] node-local rank $lr has no GPU of its own:" \
          "this node has ${#gpus[@]} (${gpus[*]}). Start at most ${#gpus[@]} ranks per node," \
          "or pass --gpu-bind none to let ranks share GPUs." >&2
        exit 1
      fi
      export CUDA_VISIBLE_DEVICES=${gpus[lr]}
    fi
  fi
  exec "$@"
fi

np=""
bind=rank
dry=0
user_bind=0
mpi_args=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -np | -n | --np | -c) np=${2:?$1 needs a number}; shift 2 ;;
    --gpu-bind) bind=${2:?--gpu-bind needs rank or none}; shift 2 ;;
    --gpu-bind=*) bind=${1#*=}; shift ;;
    --dry-run) dry=1; shift ;;
    --bind-to | -bind-to) user_bind=1; mpi_args+=("$1" "${2:?}"); shift 2 ;;
    *) mpi_args+=("$1"); shift ;;
  esac
done
if (($# == 0)); then
  echo "dice-mpirun: no dice arguments: put them after \`--\` (e.g. -- train -c CONFIG.yaml --out RUN_DIR)" >&2
  exit 2
fi
case $bind in rank | none) ;; *) echo "dice-mpirun: --gpu-bind takes rank or none, not '$bind'" >&2; exit 2 ;; esac
[[ -z $np || $np =~ ^[1-9][0-9]*$ ]] || { echo "dice-mpirun: -np takes a positive number, not '$np'" >&2; exit 2; }

dice=${DICE_BIN:-$root/build/src/app/dice}
if [[ ! -x $dice ]]; then
  echo "dice-mpirun: dice binary not found at $dice (build it: cmake -S . -B build -G Ninja && ninja -C build; or set DICE_BIN)" >&2
  exit 1
fi
mpirun=${DICE_MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "dice-mpirun: '$mpirun' not found (Debian: apt-get install openmpi-bin)" >&2; exit 1; }

mapfile -t gpus < <(node_gpus)
ngpu=${#gpus[@]}
if [[ -z $np ]]; then
  if ((ngpu > 0)); then
    np=$ngpu
  elif [[ -z ${SLURM_JOB_ID:-} ]]; then
    echo "dice-mpirun: this machine has no GPUs: say how many ranks with -np N (e.g. -np 3: 1 learner + 2 actors)" >&2
    exit 2
  fi
fi

# Ranks on this node: inside Slurm, this node's task count; across hosts, one per GPU; else all.
per_node=${np:-1}
if [[ -n ${SLURM_TASKS_PER_NODE:-} ]]; then
  per_node=${SLURM_TASKS_PER_NODE%%[(,]*}
elif ((ngpu > 0)) && printf '%s\n' "${mpi_args[@]}" | grep -Eq '^-{1,2}(host|hostfile|machinefile|H)$'; then
  per_node=$ngpu
fi
((per_node >= 1)) || per_node=1
cores=$(nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / per_node > 0 ? cores / per_node : 1 ))}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export DICE_GPU_BIND=$bind
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

cmd=("$mpirun")
[[ -n $np ]] && cmd+=(-np "$np")
((user_bind)) || cmd+=(--bind-to none)
((ngpu == 0)) && cmd+=(--oversubscribe)
while IFS= read -r v; do
  cmd+=(-x "$v")
done < <(compgen -e | grep -E '^(OMP_|NCCL_|NVSHMEM_|TORCH_|CUDA_|DICE_)|^(PATH|LD_LIBRARY_PATH)$' | sort)
cmd+=("${mpi_args[@]}" bash "$self" --rank-shim "$dice" "$@")

echo "dice-mpirun: ${np:-slurm-default} ranks, $ngpu GPUs on $(hostname -s), gpu-bind $bind, OMP_NUM_THREADS=$OMP_NUM_THREADS," \
  "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE" >&2
if ((dry)); then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
