#!/usr/bin/env bash
# Writes docs/config.md from the config structs (`dice config docs`). CTest `config_docs` fails
# when the file in the tree differs from what the built binary prints.
#   tools/gen-config-docs.sh [path/to/dice]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dice=${1:-$here/build/src/app/dice}
"$dice" config docs > "$here/docs/config.md.tmp"
mv "$here/docs/config.md.tmp" "$here/docs/config.md"
echo "wrote docs/config.md ($(wc -l < "$here/docs/config.md") lines)"
