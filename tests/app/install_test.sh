#!/usr/bin/env bash
# `cmake --install` into a prefix, then, with the source tree and the build folder hidden (an empty
# tmpfs mounted over each, in a mount namespace of this test's own): `dice --version` says where its
# harness and configs are, `dice judge` judges one built-in task, `dice ckpt init` and `dice train` on
# the quickstart config (mpirun, 3 ranks) run to their last step.
# usage: install_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -uo pipefail
build=$(readlink -f "$1") src=$(readlink -f "$2") py=$3
fail() { echo "install_test: FAIL: $*"; exit 1; }
command -v unshare >/dev/null || { echo "install_test: no unshare: skipped"; exit 77; }
if [[ $(id -u) == 0 ]]; then ns=(unshare -m --propagation private); else ns=(unshare -r -m --propagation private); fi
"${ns[@]}" true 2>/dev/null || { echo "install_test: no mount namespace here: skipped"; exit 77; }
work=$(mktemp -d /tmp/dice-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
case $work/ in "$src"/*|"$build"/*) fail "the prefix $work lies inside the tree it must work without";; esac
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
echo "installed: $(find "$prefix" -type f | wc -l) files under $prefix"

# everything below runs with the tree out of sight
cat > "$work/run.sh" <<'INNER'
set -uo pipefail
fail() { echo "install_test: FAIL: $*"; exit 1; }
mount -t tmpfs none "$SRC" || fail "cannot hide $SRC"
[[ $BUILD == "$SRC"/* ]] || mount -t tmpfs none "$BUILD" || fail "cannot hide $BUILD"
[[ ! -e $SRC/src/judge/python/runner.py && ! -e $BUILD/src/app/dice ]] || fail "the tree is still visible"
dice=$PREFIX/bin/dice share=$PREFIX/share/dice
cd "$WORK"
"$dice" --version > version.txt 2>&1 || { cat version.txt; fail "dice --version"; }
cat version.txt
grep -qF "harness, configs, tools: $share (install)" version.txt || fail "--version does not name $share as installed"

head -n 1 "$share/configs/tasks/builtin_cpu.jsonl" > one.jsonl
"$PY" -c "import json; t = json.loads(open('one.jsonl').readline()); print(json.dumps({'task_id': t['id'], 'code': t['solution']}))" > cands.jsonl
mkdir -m 755 cache
"$dice" judge --tasks one.jsonl --candidates cands.jsonl --out v.jsonl --set python="$PY" --set cache_root="$WORK/cache" \
  --set precompiled_header=false > judge.log 2>&1 || { tail -20 judge.log; fail "dice judge"; }
grep -h "^judge: .*correct" judge.log
"$PY" -c "
import json, sys
r = [json.loads(l) for l in open('v.jsonl')]
assert len(r) == 1 and r[0]['correct'] and r[0]['failure'] == 'none', r
print('judged from the install: %s correct' % r[0]['task_id'])" || fail "the built-in solution was not judged correct"

"$dice" ckpt init --config "$share/configs/models/tiny.yaml" --out model --seed 1 > init.log 2>&1 \
  || { tail -5 init.log; fail "dice ckpt init (tokenizer data/qwen3 from the install)"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun -np 3 --oversubscribe "$dice" train --config "$share/configs/train/quickstart.yaml" --model model --out train \
  > train.log 2>&1 || { tail -30 train.log; fail "dice train on the quickstart config"; }
last=$("$PY" -c "import json; print(max(json.loads(l)['step'] for l in open('train/metrics.jsonl')))")
[[ $last == 6 ]] || fail "train stopped at step $last, not 6"
ls train/plots/*.png > /dev/null 2>&1 || fail "no plots (tools/plot_metrics.py from the install)"
echo "trained from the install: 6 steps, metrics and plots in the run folder"
INNER
SRC=$src BUILD=$build PREFIX=$prefix WORK=$work PY=$py "${ns[@]}" bash "$work/run.sh" || exit 1
echo "install_test: ok"
