#!/usr/bin/env bash
# The README's first command as a user runs it: launch/quickstart.sh (the real pipeline, issue 22:
# SFT -> sampled eval -> infilling RL on the kernel judge's exec reward -> eval) in a fresh run
# directory. Asserts: it ends with the pass rate before and after RL and the pass rate rose by at
# least 5 points; the in-training eval ran at the configured steps (3 and 6, 4 samples per task)
# with its failure classes summing to its samples; the run directory holds what the last lines
# point at. quickstart_seeds_test.sh then runs the RL stage with two more seeds from this run.
#
#   quickstart_test.sh SOURCE_DIR      (DICE_BUILD_DIR, DICE_RUN_DIR from the environment)
set -euo pipefail
src=$(cd "${1:?usage: quickstart_test.sh SOURCE_DIR}" && pwd)
run=${DICE_RUN_DIR:?}
rm -rf "$run"
log=$(mktemp /tmp/dice_quickstart.XXXXXX)
trap 'rm -f "$log"' EXIT
bash "$src/launch/quickstart.sh" > "$log" 2>&1 || { cat "$log"; echo "FAIL: launch/quickstart.sh exited non-zero" >&2; exit 1; }
tail -8 "$log"
"${DICE_PYTHON:-python3}" - "$log" "$run" <<'PY'
import json, re, sys
log, run = open(sys.argv[1]).read(), sys.argv[2]
m = re.search(r"pass rate ([0-9.]+) -> ([0-9.]+) \(eval before/after RL, 6 tasks x 8 samples\)", log)
assert m, "no pass rate line"
before, after = float(m.group(1)), float(m.group(2))
assert after >= before + 0.05, "the pass rate did not rise: %.2f -> %.2f" % (before, after)
recs = [json.loads(l) for l in open(run + "/rl/metrics.jsonl")]
evals = [r for r in recs if "eval_pass_rate" in r]
assert [r["step"] for r in recs] == list(range(1, 9)), [r["step"] for r in recs]
assert [r["step"] for r in evals] == [3, 6], [r["step"] for r in evals]
assert all(sum(r["eval_failures"].values()) == r["eval_samples"] == 24 for r in evals), [r["eval_failures"] for r in evals]
for d in ("eval_before", "eval_after"):
    rows = [json.loads(l) for l in open("%s/%s/samples.jsonl" % (run, d))]
    assert len(rows) == 48 and all("verdict" in r for r in rows), d
for f in ("rl/plots/reward.png", "rl/plots/eval.png", "compare/compare.md"):
    open("%s/%s" % (run, f), "rb").close()
# what a run shows (issue 24): a time on every metrics record, log.txt with UTC stamps, the rollouts'
# decoded text, extracted code and verdict beside the ids (the events file: tfevents_check.py below)
assert all(r["time"] > 1.7e9 and r["elapsed_s"] >= 0 for r in recs), [(r.get("time"), r.get("elapsed_s")) for r in recs]
assert [r["elapsed_s"] for r in recs] == sorted(r["elapsed_s"] for r in recs)
log_txt = open(run + "/rl/log.txt").read()
assert log_txt[:4].isdigit() and "step 8/8" in log_txt, log_txt[:300]
rows = [json.loads(l) for l in open(run + "/rl/rollouts/step_000008.jsonl")]
assert len(rows) == 48, len(rows)
for x in rows:
    assert isinstance(x["response"], str) and x["response_ids"] and "code" in x, sorted(x)
    assert x["verdict"]["reward"] == x["reward"] and "failure" in x["verdict"], x["verdict"]
assert any(x["verdict"]["failure"] == "none" for x in rows), "no correct rollout at step 8"
print("quickstart: pass rate %.2f -> %.2f; in-training eval %s" %
      (before, after, [(r["step"], round(r["eval_pass_rate"], 3)) for r in evals]))
PY
"${DICE_PYTHON:-python3}" "$src/tests/train/tfevents_check.py" "$run/rl" reward_mean loss || { echo "FAIL: TensorBoard events of the RL run" >&2; exit 1; }
echo "PASS: quickstart"
