#!/usr/bin/env bash
# tools/gpu/learn_gaps.sh in its own process session, so that one pipeline runs on across device
# calls with no restart (the device tool ends a command's processes when it returns, except those that
# started a new session; a cut-off call no longer loses the step in progress). The first call starts
# it (the environment of that call, e.g. DICE_LEARN, LIMIT_S, is the pipeline's); every call waits up
# to WAIT_S seconds (default 570) for it to finish, then copies its results so far to $OUT and prints
# the progress. Call again at once (the machine goes back after 30 s idle) until "learn_bg: finished".
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
bg=${DICE_BG_DIR:-/tmp/dice_learn_bg}
t0=$(date +%s)
if [[ ! -f $bg/started ]]; then
  mkdir -p "$bg/out"
  date +%s > "$bg/started"
  OUT=$bg/out setsid nohup bash -c 'bash tools/gpu/learn_gaps.sh > "$0/driver.log" 2>&1; touch "$0/done"' "$bg" \
    < /dev/null > /dev/null 2>&1 &
  echo "learn_bg: started the pipeline"
fi
while [[ ! -f $bg/done ]] && (( $(date +%s) - t0 < ${WAIT_S:-570} )); do sleep 5; done
cp -r "$bg/out/." "$OUT/" 2>/dev/null
cp "$bg/driver.log" "$OUT/" 2>/dev/null
echo "learn_bg: $(( $(date +%s) - $(cat "$bg/started") )) s since the start"
log=$bg/out/learn_gaps.log
grep "^learn_gaps:\|^sft: \|judge_error on task\|eval curve\|pass rate\|Exec\|^eval: " "$log" 2>/dev/null | cut -c1-400 | tail -30
grep "^step .*\[\(infill\|e2e\)\]" "$log" 2>/dev/null | tail -8  # the RL steps
grep "^step " "$log" 2>/dev/null | tail -1
echo "learn_bg: $(grep -c "to the plain build" "$log" 2>/dev/null) hand-overs to the plain build so far"
if [[ -f $bg/done ]]; then echo "learn_bg: finished"; tail -45 "$bg/driver.log"; fi
