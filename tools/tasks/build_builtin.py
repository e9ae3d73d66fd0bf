#!/usr/bin/env python3
"""Builds the built-in task sets from configs/tasks/builtin/<NNN_name>/.

Each task directory holds:
  reference.py     KernelBench-style reference (Model, get_inputs, get_init_inputs) with the SMALL
                   module-level sizes of the CPU form;
  meta.json        {"level": L, "difficulty": d, "cuda_sizes": {"name": value, ...}}: the CUDA form is
                   the same reference with those module-level `name = <int>` lines rewritten;
  solution_cpu.py  honest C++-only load_inline solution (plain loops over data_ptr<float>());
  solution_cuda.py honest CUDA load_inline solution (real __global__ kernels).
  wrong_cpu.json   (optional) wrong twins of the CPU solution, [{"kind", "find", "replace"}]: each
                   replaces one exact piece of solution_cpu.py (found once) to give code that builds
                   and runs but computes something else; written as the task's "wrong_solutions".
  wrong_cuda.json  (optional) the same for solution_cuda.py.

Every task also gets the kernel-infilling split of its solution (BiC-RL stage 1): the middle is
the solution's first source-string assignment, the prefix and suffix the rest.

Writes configs/tasks/builtin_cpu.jsonl and configs/tasks/builtin_cuda.jsonl (DESIGN §4 task
records, ids builtin_<device>_<NNN_name>, sorted easy -> hard by difficulty), and
configs/tasks/builtin_{cpu,cuda}_gaps.jsonl: the tasks that have wrong twins, each with the smallest
gap instead (ids builtin_<device>_gap_<NNN_name>): the infill middle is the span where the solution and
its twins differ, widened to whole words, so an answer is a few tokens that decide whether the
kernel is right (the quickstart's fill-in-the-middle tasks: a tiny model learns them in a minute).
Needs no torch.

  tools/tasks/build_builtin.py [--root configs/tasks] [--check]
--check exits 1 when the committed JSONL files differ from what would be written.
"""
import argparse
import json
import os
import re
import sys

SIZE_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = (-?[0-9]+)$")


def with_sizes(reference, sizes, where):
    """Returns reference with the module-level integer assignments named in sizes replaced."""
    seen = set()
    out = []
    for line in reference.split("\n"):
        m = SIZE_LINE.match(line)
        if m and m.group(1) in sizes:
            line = f"{m.group(1)} = {int(sizes[m.group(1)])}"
            seen.add(m.group(1))
        out.append(line)
    missing = sorted(set(sizes) - seen)
    if missing:
        sys.exit(f"{where}: cuda_sizes names {missing}, but reference.py has no module-level "
                 f"'<name> = <int>' line for them")
    return "\n".join(out)


SOURCE_OPEN = re.compile(r'^[A-Za-z_][A-Za-z0-9_]* = r?"""')


def infill_split(solution, where):
    """DICE's kernel-infilling split of a solution file: the middle is the first source-string
    assignment (`name = r\"\"\"...\"\"\"`, the kernels and their host code); prefix and suffix are the rest."""
    lines = solution.split("\n")
    start = next((i for i, line in enumerate(lines) if SOURCE_OPEN.match(line)), None)
    if start is None:
        sys.exit(f"{where}: no source-string assignment (name = r\"\"\"...) to split for infilling")
    first = lines[start][lines[start].index('"""') + 3:]
    end = start if '"""' in first else next((i for i in range(start + 1, len(lines)) if '"""' in lines[i]), None)
    if end is None:
        sys.exit(f"{where}: the source string opened on line {start + 1} never closes")
    prefix = "\n".join(lines[:start]) + "\n"
    suffix = "\n".join(lines[end + 1:])
    middle = "\n".join(lines[start:end + 1]) + "\n"
    assert prefix + middle + suffix == solution
    return {"prefix": prefix, "suffix": suffix}


def wrong_solutions(path, solution, device):
    """The task's wrong twins (wrong_<device>.json) as [{kind, code}]."""
    f = os.path.join(path, f"wrong_{device}.json")
    if not os.path.exists(f):
        return []
    out = []
    for k, w in enumerate(json.loads(read(f))):
        if set(w) != {"kind", "find", "replace"}:
            sys.exit(f"{f}: twin {k}: needs exactly kind, find, replace")
        if solution.count(w["find"]) != 1:
            sys.exit(f"{f}: twin {k}: 'find' occurs {solution.count(w['find'])} times in solution_{device}.py (want 1)")
        out.append({"kind": w["kind"], "code": solution.replace(w["find"], w["replace"])})
    return out


WORD = re.compile(r"[A-Za-z0-9_.]")


def gap_split(solution, wrong, where):
    """The infill split whose middle is the smallest span where the solution and its twins differ,
    widened to whole words (identifiers and numbers are never cut)."""
    lo, hi = len(solution), 0  # the gap is solution[lo:hi]
    for w in wrong:
        other = w["code"]
        a = 0
        while a < min(len(solution), len(other)) and solution[a] == other[a]:
            a += 1
        b = 0
        while b < min(len(solution), len(other)) - a and solution[-1 - b] == other[-1 - b]:
            b += 1
        lo, hi = min(lo, a), max(hi, len(solution) - b)
    while lo > 0 and WORD.match(solution[lo - 1]):
        lo -= 1
    while hi < len(solution) and WORD.match(solution[hi]):
        hi += 1
    if hi <= lo:
        sys.exit(f"{where}: a twin equals the solution")
    prefix, suffix = solution[:lo], solution[hi:]
    for w in wrong:
        assert w["code"].startswith(prefix) and w["code"].endswith(suffix) and len(w["code"]) > len(prefix) + len(suffix) - 1
    return {"prefix": prefix, "suffix": suffix}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def build(root):
    builtin = os.path.join(root, "builtin")
    dirs = sorted(d for d in os.listdir(builtin) if re.match(r"^\d{3}_\w+$", d))
    if not dirs:
        sys.exit(f"no task directories (NNN_name) under {builtin}")
    sets = {"cpu": [], "cuda": [], "cpu_gaps": [], "cuda_gaps": []}
    for d in dirs:
        path = os.path.join(builtin, d)
        meta = json.loads(read(os.path.join(path, "meta.json")))
        for key in ("level", "difficulty", "cuda_sizes"):
            if key not in meta:
                sys.exit(f"{path}/meta.json: missing '{key}'")
        reference = read(os.path.join(path, "reference.py"))
        for device in ("cpu", "cuda"):
            ref = reference if device == "cpu" else with_sizes(reference, meta["cuda_sizes"], path)
            solution = read(os.path.join(path, f"solution_{device}.py"))
            task = {
                "id": f"builtin_{device}_{d}",
                "level": int(meta["level"]),
                "difficulty": float(meta["difficulty"]),
                "reference": ref,
                "infill": infill_split(solution, f"{path}/solution_{device}.py"),
                "solution": solution,
                "device": device,
            }
            wrong = wrong_solutions(path, solution, device)
            if wrong:
                task["wrong_solutions"] = wrong
                gap = dict(task, id=f"builtin_{device}_gap_{d}",
                           infill=gap_split(solution, wrong, f"{path}/wrong_{device}.json"))
                sets[f"{device}_gaps"].append(gap)
            sets[device].append(task)
    out = {}
    for device, tasks in sets.items():
        tasks.sort(key=lambda t: (t["difficulty"], t["id"]))
        out[device] = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(here, "..", "..", "configs", "tasks"))
    ap.add_argument("--check", action="store_true", help="fail if the committed files are stale")
    args = ap.parse_args()
    out = build(args.root)
    stale = False
    for device, text in out.items():
        path = os.path.normpath(os.path.join(args.root, f"builtin_{device}.jsonl"))
        if args.check:
            if not os.path.exists(path) or read(path) != text:
                print(f"{path} is stale: run tools/tasks/build_builtin.py", file=sys.stderr)
                stale = True
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path}: {text.count(chr(10))} tasks")
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
