#!/usr/bin/env bash
# Which sandbox protection keeps CUDA from initialising in the judge's executors on this node?
# Judges one honest CUDA candidate under each variant and prints its failure class; prints the
# first variant that passes as "SANDBOX_FIX=<--set ...>" (empty when the default passes).
set -uo pipefail
cd "$(dirname "$0")/../.."
dice=${DICE:-build-gpu/src/app/dice}
d=/tmp/dice-sbx; rm -rf "$d"; mkdir -p "$d"; chmod 755 "$d"
python3 tools/gpu/judge_cases.py write "$d/cases" > /dev/null
head -n 1 "$d/cases/candidates_checked.jsonl" > "$d/one.jsonl"
fix=none
for v in "" "sandbox.uid_base=-2" "sandbox.pid_namespace=false" "sandbox.readonly_root=false" \
         "sandbox.mount_namespace=false" "sandbox.network_namespace=false" "sandbox.enabled=false"; do
  sets=(--set device=cuda --set python=python3 --set "cache_root=$d/cache")
  [[ -n $v ]] && sets+=(--set "$v")
  rm -f "$d/v.jsonl"  # a crashed run must not leave the previous variant's verdict behind
  "$dice" judge --tasks "$d/cases/tasks.jsonl" --candidates "$d/one.jsonl" --out "$d/v.jsonl" "${sets[@]}" > "$d/log" 2>&1
  cls=$(python3 -c "import json; r=json.loads(open('$d/v.jsonl').readline()); print(r['failure'], '|', r['log_tail'][-160:].replace(chr(10),' '))" 2>/dev/null)
  echo "variant [${v:-default}] -> $cls"
  if [[ $fix == none && $cls == none* ]]; then fix=$v; fi
done
echo "SANDBOX_FIX=$fix"
