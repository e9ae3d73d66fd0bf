#!/usr/bin/env bash
# CPU smoke test of `dice bench learner` (tiny shape, no peer): both step maps and both scoring
# paths print a throughput row, the per-step split and the per-part split; the JSON holds them;
# --grad-check passes; a bad --paths value is refused with a sentence (rc 2); --sample-batch samples
# on the learner's compute copy after each row, and a --sample-len too short for the prompt is refused.
set -uo pipefail
DICE=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/out.txt" 2>/dev/null; exit 1; }
"$DICE" bench learner --shapes tiny --prompt-len 13 --response-len 40 --responses 3 --no-peer --parts \
  --paths fast,plain --checkpoint 1 --sample-batch 3 --sample-len 64 --json "$work/r.json" > "$work/out.txt" 2>&1 ||
  fail "bench learner exited $?"
for s in static dynamic; do
  for p in fast plain; do
    grep -Eq "^tiny +$s +$p +3 " "$work/out.txt" || fail "no row for $s / $p"
  done
done
[[ $(grep -c "per step: old log-probs" "$work/out.txt") == 4 ]] || fail "per-step split missing"
[[ $(grep -c "parts (one step timed op by op" "$work/out.txt") == 4 ]] || fail "per-part split missing"
grep -q "1 layers checkpointed" "$work/out.txt" || fail "the fast rows did not checkpoint a layer"
[[ $(grep -c "colocated sampling on the learner's compute copy (its state kept): 3 x 64 KV cache slots, 24 tokens" \
  "$work/out.txt") == 4 ]] || fail "--sample-batch: no colocated sampling line after each row"
python3 - "$work/r.json" <<'PY' || fail "JSON results"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r) == 4, len(r)
for x in r:
    assert x["row_tokens_per_s"] > 0 and x["reference_tokens"] > x["packed_tokens"] > 0, x
    assert x["targets"] > 0 and sum(x["parts_s"].values()) > 0, x
    c = x["colocated_sampling"]  # --sample-batch 3: 8 new tokens each on the learner's copy
    assert c["batch"] == 3 and c["max_len"] == 64 and c["tokens"] == 24 and c["seconds"] > 0, c
# the same rollouts score the same loss on both paths (fp32 CPU)
for s in ("static", "dynamic"):
    f, p = [x for x in r if x["strategy"] == s and x["path"] == "fast"][0], [x for x in r if x["strategy"] == s and x["path"] == "plain"][0]
    assert f["reference_tokens"] == p["reference_tokens"]
PY
"$DICE" bench learner --grad-check --shapes tiny > "$work/out.txt" 2>&1 || fail "grad-check exited $?"
[[ $(grep -c "^grad-check PASS" "$work/out.txt") == 2 ]] || fail "grad-check lines"
"$DICE" bench learner --shapes tiny --paths quick --no-peer > "$work/out.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "unknown path 'quick'" "$work/out.txt" || fail "bad --paths: rc $rc"
"$DICE" bench learner --shapes tiny --prompt-len 13 --response-len 40 --responses 3 --no-peer --strategies static \
  --sample-batch 2 --sample-len 16 > "$work/out.txt" 2>&1
rc=$?
[[ $rc != 0 ]] && grep -q "sample-len 16 leaves no room" "$work/out.txt" || fail "--sample-len too short: rc $rc"
echo PASS
