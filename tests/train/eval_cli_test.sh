#!/usr/bin/env bash
# End-to-end `dice eval` on CPU through mpirun:
#  1. a tiny random checkpoint on the built-in CPU task set: 2 ranks give the same records and
#     metrics as 1 rank (responses equal byte for byte: item i uses noise stream i on any rank);
#  2. honest solutions fed as responses on a few tasks: Exec 100 with 1 and 2 ranks;
#  3. an interrupted eval resumes without redoing judged samples;
#  4. report.md / report.json exist, the PNG plots are valid images, `eval report --compare` writes
#     the table and the side-by-side plot (compare.png, linked from compare.md);
#  5. configs/eval/kernelbench-dice.yaml resolves to DICE's protocol, runs with a prompt template of
#     the user's (--prompt-template), and a template with an unknown placeholder is refused.
# usage: eval_cli_test.sh DICE_BINARY SOURCE_DIR
set -euo pipefail
dice=$1
src=$2
cd "$src"
work=$(mktemp -d /tmp/dice_eval_test.XXXXXX)
chmod 755 "$work"  # the judge sandbox runs candidates as another uid: the build cache must be reachable
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe)
fail() { echo "FAIL: $*" >&2; exit 1; }
py=${DICE_PYTHON:-python3}

"$dice" ckpt init --config configs/models/tiny.yaml --out "$work/model" --seed 3 > /dev/null
common=(--checkpoint "$work/model" --tasks configs/tasks/builtin_cpu.jsonl --set sampler.max_new_tokens=32
        --set "judge.cache_root=$work/cache" --set plots=true)

echo "== 1. random tiny model, 1 rank vs 2 ranks"
"${mpi[@]}" -np 1 "$dice" eval "${common[@]}" --out "$work/r1" > "$work/r1.log" 2>&1 || { cat "$work/r1.log"; fail "np 1 eval"; }
"${mpi[@]}" -np 2 "$dice" eval "${common[@]}" --out "$work/r2" > "$work/r2.log" 2>&1 || { cat "$work/r2.log"; fail "np 2 eval"; }
"$py" - "$work/r1" "$work/r2" <<'PY' || fail "1-rank and 2-rank results differ"
import json, sys
a, b = sys.argv[1], sys.argv[2]
ra = [json.loads(l) for l in open(a + "/samples.jsonl")]
rb = [json.loads(l) for l in open(b + "/samples.jsonl")]
assert len(ra) == len(rb) == 34, (len(ra), len(rb))
for x, y in zip(ra, rb):
    assert x["task_id"] == y["task_id"] and x["sample_id"] == y["sample_id"]
    assert x["response"] == y["response"], x["task_id"]
    assert x["verdict"]["failure"] == y["verdict"]["failure"], x["task_id"]
    assert x["response_tokens"] > 0
ma, mb = json.load(open(a + "/report.json")), json.load(open(b + "/report.json"))
assert ma["levels"] == mb["levels"], "metrics differ"
assert ma["levels"]["all"]["exec"] == 0.0 and ma["levels"]["all"]["samples"] == 34
print("np1 == np2 on", len(ra), "samples; Exec", ma["levels"]["all"]["exec"])
PY

echo "== 2. honest solutions as responses (4 tasks), 1 and 2 ranks"
head -n 4 configs/tasks/builtin_cpu.jsonl > "$work/four.jsonl"
# no precompiled header: it would outlive this throw-away cache (4 builds do not pay for it)
sol=(--tasks "$work/four.jsonl" --use-solutions --set "judge.cache_root=$work/cache" --set plots=false
     --set judge.precompiled_header=false)
"${mpi[@]}" -np 2 "$dice" eval "${sol[@]}" --out "$work/s2" > "$work/s2.log" 2>&1 || { cat "$work/s2.log"; fail "solutions np 2"; }
"${mpi[@]}" -np 1 "$dice" eval "${sol[@]}" --out "$work/s1" > "$work/s1.log" 2>&1 || { cat "$work/s1.log"; fail "solutions np 1"; }
for d in s1 s2; do
  "$py" -c "import json,sys; m=json.load(open('$work/$d/report.json'))['levels']['all']; sys.exit(0 if m['exec']==100.0 and m['compile_rate']==100.0 else 1)" \
    || { cat "$work/$d/report.md"; "$py" -c "import json; [print(json.loads(l)['verdict']) for l in open('$work/$d/samples.jsonl')]"; fail "solutions not Exec 100 ($d)"; }
done

echo "== 2b. eval.kind: end_to_end shows tasks with an infill split the reference alone; infill needs the split"
head -n 2 configs/tasks/builtin_cpu_gaps_quick.jsonl > "$work/gaps2.jsonl"
kind=(--checkpoint "$work/model" --set sampler.max_new_tokens=4 --set plots=false
      --set "judge.cache_root=$work/cache")
for k in auto end_to_end; do
  "$dice" eval "${kind[@]}" --tasks "$work/gaps2.jsonl" --set kind=$k --out "$work/k_$k" > "$work/k_$k.log" 2>&1 || { cat "$work/k_$k.log"; fail "eval kind=$k"; }
done
"$py" - "$work" <<'PY' || fail "eval.kind did not choose the prompts"
import json, sys
w = sys.argv[1]
tasks = [json.loads(l) for l in open(w + "/gaps2.jsonl")]
for kind, infill in (("auto", True), ("end_to_end", False)):
    rows = [json.loads(l) for l in open("%s/k_%s/samples.jsonl" % (w, kind))]
    assert len(rows) == 2, (kind, len(rows))
    for r, t in zip(rows, tasks):
        shown = t["infill"]["prefix"][-200:] in r["prompt"]
        assert shown == infill, (kind, t["id"], "the infill prefix is%s in the prompt" % ("" if shown else " not"))
        assert t["reference"].strip()[:80] in r["prompt"], (kind, "no reference in the prompt")
print("kind auto: infill prompts; kind end_to_end: the reference alone")
PY
"$py" -c "
import json
for l in open('$work/gaps2.jsonl'):
    t = json.loads(l); t.pop('infill'); print(json.dumps(t))" > "$work/nosplit.jsonl"
if "$dice" eval "${kind[@]}" --tasks "$work/nosplit.jsonl" --set kind=infill --out "$work/k_bad" > "$work/k_bad.log" 2>&1; then
  fail "kind=infill on tasks without a split was accepted"
fi
grep -q "eval.kind is infill, but task 'builtin_cpu_gap_001_add' has no infill split" "$work/k_bad.log" \
  || { cat "$work/k_bad.log"; fail "no sentence for kind=infill without a split"; }

echo "== 3. resume after an interruption"
# Keep two of the four judged records (as if the run died), drop the merged file, rerun.
cat "$work"/s1/parts/*.jsonl | head -n 2 > "$work/keep"
rm -f "$work"/s1/parts/*.jsonl "$work/s1/samples.jsonl"
cp "$work/keep" "$work/s1/parts/samples.rank0.jsonl"
printf '{"task_id": "builtin_cpu_00' >> "$work/s1/parts/samples.rank0.jsonl"  # a record cut short
"${mpi[@]}" -np 1 "$dice" eval "${sol[@]}" --out "$work/s1" > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume"; }
grep -q "2 already judged, 2 to do" "$work/resume.log" || { cat "$work/resume.log"; fail "resume did not skip the judged samples"; }
[[ $(wc -l < "$work/s1/samples.jsonl") -eq 4 ]] || fail "resumed run does not hold 4 records"

echo "== 4. report files and plots"
for f in report.md report.json config.yaml speedup.png failures.png log.txt; do [[ -s $work/r2/$f ]] || fail "missing $f"; done
# the run's log: rank 0's lines with UTC timestamps, the last one where the results are
grep -qE "^\[?[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z.*eval: done in [0-9]+ s; results in .*r2" "$work/r2/log.txt" \
  || { cat "$work/r2/log.txt"; fail "log.txt has no timestamped 'eval: done' line"; }
check_png() {
  "$py" - "$@" <<'PY' || fail "invalid PNG: $*"
import struct, sys, zlib
for p in sys.argv[1:]:
    data = open(p, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", p
    n, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and n == 13, p
    w, h = struct.unpack(">II", data[16:24])
    assert w > 100 and h > 100, (p, w, h)
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0], p
print("PNG ok")
PY
}
check_png "$work/r2/speedup.png" "$work/r2/failures.png"
grep -q "| L1 Exec |" "$work/r2/report.md" || fail "report.md has no table"
"$dice" eval report --compare "$work/r1" "$work/s2" --out "$work/cmp" > "$work/cmp.log" || fail "compare"
[[ $(grep -c "^| " "$work/cmp/compare.md") -eq 3 ]] || { cat "$work/cmp/compare.md"; fail "compare table rows"; }
check_png "$work/cmp/compare.png"  # the two results side by side
grep -q "](compare.png)" "$work/cmp/compare.md" || { cat "$work/cmp/compare.md"; fail "compare.md does not show compare.png"; }

echo "== 5. clear errors"
if "$dice" eval --tasks configs/tasks/builtin_cpu.jsonl --out "$work/x" --checkpoint "$work/nope" > "$work/err.log" 2>&1; then
  fail "a missing checkpoint was accepted"
fi
grep -q "does not exist" "$work/err.log" || { cat "$work/err.log"; fail "missing-checkpoint message"; }
echo "== 5. DICE's protocol preset (configs/eval/kernelbench-dice.yaml) with a prompt template of the user's"
"$dice" eval -c configs/eval/kernelbench-dice.yaml --checkpoint "$work/model" --tasks configs/tasks/builtin_cpu.jsonl \
  --prompt-template configs/prompts/quick_end_to_end_cpu.txt --out "$work/p" --print-config > "$work/preset.yaml"
"$py" - "$work/preset.yaml" <<'PY' || fail "the preset does not resolve to DICE's protocol"
import sys
t = open(sys.argv[1]).read()
for want in ("dtype: float16", "strategy: low_confidence_static", "block_size: 4", "max_new_tokens: 4096", "trials: 5",
             "iters: 100", "warmup: 3", "quick_end_to_end_cpu.txt"):
    assert want in t, (want, t[:2000])
print("preset resolves: fp16, low-confidence static, block 4, 4096 tokens, 5 trials, 3 + 100 timed runs")
PY
head -2 configs/tasks/builtin_cpu.jsonl > "$work/two.jsonl"
printf 'Write ModelNew for this model.\n{reference}\nAnswer with one code block.\n' > "$work/tpl.txt"
# on this CPU: bf16 weights (a CPU has no fp16 matmul) and a short answer; the template is the user's
"$dice" eval -c configs/eval/kernelbench-dice.yaml --checkpoint "$work/model" --tasks "$work/two.jsonl" \
  --prompt-template "$work/tpl.txt" --set dtype=bfloat16 --set sampler.max_new_tokens=16 --set sampler.max_len=2048 \
  --set "judge.cache_root=$work/cache" --set plots=false --out "$work/p" > "$work/p.log" 2>&1 || { cat "$work/p.log"; fail "preset eval"; }
[[ $(wc -l < "$work/p/samples.jsonl") -eq 2 ]] || fail "preset eval: expected 2 records"
printf 'Write ModelNew.\n{reference}\n{arch}\n' > "$work/bad_tpl.txt"
if "$dice" eval -c configs/eval/kernelbench-dice.yaml --checkpoint "$work/model" --tasks "$work/two.jsonl" \
    --prompt-template "$work/bad_tpl.txt" --set dtype=bfloat16 --out "$work/pb" > "$work/pb.log" 2>&1; then
  fail "a template with an unknown placeholder was accepted"
fi
grep -q "{arch}" "$work/pb.log" || { cat "$work/pb.log"; fail "the refusal does not name the placeholder"; }
echo "eval_cli_test: all passed"
