#!/usr/bin/env bash
# Runs a test as an unprivileged user: the judge's sandbox as a cluster user has it (issue 23).
#   as_user.sh CACHE_DIR COMMAND...
# As root: creates the user dice-ci (with a home) if it is missing, gives it CACHE_DIR (its own
# build cache: a judge uses only entries its own user made), makes the directories on the way to
# the sources and the build traversable (o+x, not readable), and runs COMMAND as that user with a
# clean environment. Not root: runs COMMAND as it is, already unprivileged. DICE_PCH_ROOT, when set,
# is passed on: the suite's precompiled headers, built by root (the judge takes a finished PCH of
# root's as an administrator's shared one), so the user builds none.
set -euo pipefail
cache=$1
shift
if [[ $(id -u) != 0 ]]; then
  mkdir -p "$cache"
  exec env DICE_TEST_CACHE_ROOT="$cache" "$@"
fi
user=${DICE_TEST_USER:-dice-ci}
if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user"
  echo "as_user: created the user $user"
fi
home=$(getent passwd "$user" | cut -d: -f6)
uid=$(id -u "$user")
# Directories on the way to the command and the sources: traversable by others (o+x only).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for p in "$@" "$here" "$cache" ${DICE_PCH_ROOT:+"$DICE_PCH_ROOT"}; do
  [[ $p == /* && -e $p ]] || continue
  d=$(dirname "$(readlink -f "$p")")
  while [[ $d != / ]]; do
    if [[ $(stat -c %A "$d") != ?????????[xt]* ]]; then
      echo "as_user: $d is not traversable by other users; adding o+x (not o+r) for $user"
      chmod o+x "$d"
    fi
    d=$(dirname "$d")
  done
done
mkdir -p "$cache"
chown -R "$user:" "$cache"
# the test's own places: a new user has none but its home
cd "$home"
exec setpriv --reuid="$uid" --regid="$(id -g "$user")" --init-groups --inh-caps=-all \
  env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" USER="$user" LOGNAME="$user" LANG=C.UTF-8 \
  OMP_NUM_THREADS=1 DICE_TEST_CACHE_ROOT="$cache" ${CUDA_HOME:+CUDA_HOME=$CUDA_HOME} \
  ${DICE_PCH_ROOT:+DICE_PCH_ROOT=$DICE_PCH_ROOT} "$@"
