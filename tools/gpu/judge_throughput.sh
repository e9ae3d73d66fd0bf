#!/usr/bin/env bash
# Judge throughput on the GPU node (issue 21): `dice bench judge` on the built-in CUDA solutions plus
# distinct variants the bench makes (cold build cache, then warm), with the judge's default settings,
# and the same candidates judged by another commit's `dice judge` (the "before"), cold.
#
# usage (repo root):  OUT=/path [STEPS="build after before"] [VARIANTS=1] [N_TASKS=24] [SETS="k=v ..."]
#                     [BEFORE=dir] [CACHE=dir] tools/gpu/judge_throughput.sh
#   CPU_BY  set: the after step's CPU time by kind of process (tools/gpu/cpu_by_process.py)
#   CACHE   the build cache of the after step (default: a fresh one; name an existing one to judge
#           execution alone, e.g. a second run with SETS="executors=8" BENCH_ARGS="--warm false")
#   build   builds this tree (build-gpu/) and, with BEFORE=dir (a source tree, e.g.
#           `git archive 9300025 | tar -x -C dir`), that one too, both at once; copies the binaries to
#           $OUT/dice and $OUT/dice_before (carry them into a later call as .gpu/dice, .gpu/dice_before)
#   after   dice bench judge (cold + warm) with this tree's binary; writes $OUT/candidates.jsonl
#   alone   the same bench on ALONE_TASKS (4) tasks with 1 compile worker and 1 executor (what each part
#           costs with nothing else running), the PCH copied from the after step's cache
#   before  the before binary's `dice judge` on $OUT/candidates.jsonl (or .gpu/candidates.jsonl), cold
# Binaries: build-gpu/src/app/dice, else .gpu/dice; BEFORE's build, else .gpu/dice_before.
# Results: $OUT/bench.txt, $OUT/bench.json, $OUT/before.txt, $OUT/build*.txt. Output is line-buffered
# and each step is bounded (STEP_LIMIT_S, default 420 s), so a call ends with what it measured.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dice_judge_throughput}
mkdir -p "$OUT"
PY=$(command -v python3)
export DICE_PYTHON=$PY
STEPS=${STEPS:-build after}
limit=${STEP_LIMIT_S:-420}
sets=(--set device=cuda --set "python=$PY")
for s in ${SETS:-}; do sets+=(--set "$s"); done
has() { [[ " $STEPS " == *" $1 "* ]]; }
rc=0

if has build; then
  start=$(date +%s)
  if [[ -n ${BEFORE:-} ]]; then  # both builds at once: 16 cores
    (cd "$BEFORE" && BUILD_TARGETS=dice bash tools/gpu/build.sh > "$OUT/build_before.txt" 2>&1) &
    bpid=$!
  fi
  BUILD_TARGETS=dice bash tools/gpu/build.sh > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
  strip -o "$OUT/dice" build-gpu/src/app/dice
  if [[ -n ${BEFORE:-} ]]; then
    wait $bpid || { tail -40 "$OUT/build_before.txt"; exit 1; }
    strip -o "$OUT/dice_before" "$BEFORE/build-gpu/src/app/dice"
  fi
  echo "builds: $(( $(date +%s) - start )) s"
fi
dice=build-gpu/src/app/dice
[[ -x $dice ]] || { mkdir -p build-gpu/src/app && cp .gpu/dice "$dice" && chmod +x "$dice"; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader

# busy and total CPU seconds of the machine so far (/proc/stat: user nice system idle iowait irq softirq steal)
cpu_now() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b/hz, (b+$5+$6)/hz}' /proc/stat; }
cpu_report() {  # label, "busy total" at the start, candidates
  echo "$(cpu_now) $2" | awk -v l="$1" -v n="$3" '{b=$1-$3; t=$2-$4;
    printf "%s: machine CPU busy %.0f s of %.0f s (%.0f%%), %.1f CPU-s per candidate\n", l, b, t, 100*b/t, b/n}'
}

if has after; then
  cache=${CACHE:-$(mktemp -d /tmp/dice-throughput-cache.XXXXXX)}; mkdir -p "$cache"; chmod 755 "$cache"
  vmstat -n 5 > "$OUT/vmstat_after.txt" 2>&1 & vm=$!
  c0=$(cpu_now)
  wrap=(); [[ -n ${CPU_BY:-} ]] && wrap=("$PY" tools/gpu/cpu_by_process.py "$OUT/cpu_after.json" --)
  "${wrap[@]}" timeout "$limit" stdbuf -oL -eL "$dice" bench judge --n-tasks "${N_TASKS:-24}" --variants "${VARIANTS:-1}" "${sets[@]}" \
    --set "cache_root=$cache" --write-candidates "$OUT/candidates.jsonl" --out "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 \
    | grep --line-buffered -v "^\[" | tee "$OUT/bench.txt" | cut -c1-400
  rc=$(( rc | ${PIPESTATUS[0]} ))
  kill $vm 2>/dev/null
  cpu_report "after (PCH, cold and warm passes)" "$c0" "$(( ${N_TASKS:-24} * (1 + ${VARIANTS:-1}) ))" | tee -a "$OUT/bench.txt"
  "$PY" - "$cache" <<'PY' | tee -a "$OUT/bench.txt"
import glob, json, statistics as st, sys
ms = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*/meta.json")]
print("cache: %d builds, by header %s, called through dice_bind %d" % (
    len(ms), {h: sum(m.get("header") == h for m in ms) for h in set(m.get("header") for m in ms)},
    sum(bool(m.get("binding")) for m in ms)))
hits = [p for m in ms for p in m.get("cached_parts", [])]
print("  parts from the part cache: %s; launches counted (no CUPTI) in %d of %d builds" % (
    {p: hits.count(p) for p in sorted(set(hits))}, sum(bool(m.get("launch_counter")) for m in ms), len(ms)))
for k in ("unit", "main", "main_pybind", "host", "host_full", "device", "device2", "link"):
    v = [m["steps"][k] for m in ms if k in m.get("steps", {})]
    if v:
        print("  step %-11s n %3d  median %6.2f s  max %6.2f s" % (k, len(v), st.median(v), max(v)))
PY
fi

if has alone; then  # one build and one evaluation at a time, the PCH taken from the "after" step's cache
  acache=$(mktemp -d /tmp/dice-throughput-alone.XXXXXX); chmod 755 "$acache"
  cp -a "${cache:-/nonexistent}"/pch-* "$acache"/ 2>/dev/null || echo "alone: no PCH from the after step: it is built first"
  echo "== alone: 1 compile worker, 1 executor"
  timeout "${ALONE_LIMIT_S:-$limit}" stdbuf -oL -eL "$dice" bench judge --n-tasks "${ALONE_TASKS:-4}" --variants 1 "${sets[@]}" \
    --set "cache_root=$acache" --set compile_workers=1 --set executors=1 --out "$OUT/alone.json" 2>&1 \
    | grep --line-buffered -v "^\[" | tee "$OUT/alone.txt" | cut -c1-400
  "$PY" - "$acache" <<'PY' | tee -a "$OUT/alone.txt"
import glob, json, statistics as st, sys
ms = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*/meta.json")]
for k in ("unit", "main", "main_pybind", "host", "host_full", "device", "device2", "link"):
    v = [m["steps"][k] for m in ms if k in m.get("steps", {})]
    if v:
        print("  alone: step %-11s n %3d  median %6.2f s  max %6.2f s" % (k, len(v), st.median(v), max(v)))
PY
fi

if has before; then
  before=${BEFORE:+$BEFORE/build-gpu/src/app/dice}
  [[ -n $before && -x $before ]] || before=.gpu/dice_before
  cands=$OUT/candidates.jsonl
  [[ -s $cands ]] || cands=.gpu/candidates.jsonl
  chmod +x "$before"
  bcache=$(mktemp -d /tmp/dice-throughput-before.XXXXXX); chmod 755 "$bcache"
  echo "== before: $before judge on $(wc -l < "$cands") candidates, cold cache ${BEFORE_SETS:-}"
  t0=$(date +%s.%N)
  c0=$(cpu_now)
  timeout "$limit" stdbuf -oL -eL "$before" judge --tasks configs/tasks/builtin_cuda.jsonl --candidates "$cands" \
    --out "$OUT/verdicts_before.jsonl" "${sets[@]}" --set "cache_root=$bcache" ${BEFORE_SETS:-} 2>&1 \
    | grep --line-buffered -v "^\[" | tee "$OUT/before.txt" | tail -6
  cpu_report "before" "$c0" "$(wc -l < "$cands")" | tee -a "$OUT/before.txt"
  echo "before: wall $("$PY" -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/before.txt"
fi
exit $rc
