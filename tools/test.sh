#!/usr/bin/env bash
# Builds dice and runs the test suite (the README's test command). Extra args go to ctest,
# e.g. `tools/test.sh -L text` or `tools/test.sh -R judge`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${DICE_BUILD_DIR:-$here/build}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One precompiled torch header for every judge of the suite with a persistent cache (each test's cache
# would otherwise build its own: ~2.5 min of both cores each); tests of the PCH build itself unset it.
export DICE_PCH_ROOT=${DICE_PCH_ROOT:-$build/test_pch}
export DICE_STRICT_METRICS=1  # a metrics field that is not in metric_fields.h fails the run (a misspelt name)
cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@"
