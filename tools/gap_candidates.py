#!/usr/bin/env python3
"""Candidates for `dice judge` from a gap task set (configs/tasks/builtin_*_gaps.jsonl): per task its
solution (right), its first wrong twin (compiles, wrong values) and the gap filled with a stray token
(a compile error in the candidate's own code); a second argument picks kinds (solution,twin), among
them these compile errors of the kinds a policy in training writes, for tools/gpu/shortcut_check.sh:
unbalanced (the gap's answer and a stray "("), undefined (a word nothing declares in its place),
literal (the answer with ".5f" glued on). Judging them shows the judge's cost per class:

  python3 tools/gap_candidates.py configs/tasks/builtin_cpu_gaps.jsonl > /tmp/gap_cands.jsonl
  dice judge --tasks configs/tasks/builtin_cpu_gaps.jsonl --candidates /tmp/gap_cands.jsonl \\
    --out /tmp/gap_verdicts.jsonl --set device=cpu --set cache_root=/tmp/gap_cache
"""
import json
import sys

kinds = sys.argv[2].split(",") if len(sys.argv) > 2 else ["solution", "twin", "syntax_error"]  # which to write
unknown = set(kinds) - {"solution", "twin", "syntax_error", "unbalanced", "undefined", "literal"}
if unknown:
    sys.exit("gap_candidates.py: unknown kind(s) %s" % ", ".join(sorted(unknown)))
for line in open(sys.argv[1]):
    task = json.loads(line)
    gap = task["infill"]
    middle = task["solution"][len(gap["prefix"]):len(task["solution"]) - len(gap["suffix"])]
    for sample, code in (("solution", task["solution"]), ("twin", task["wrong_solutions"][0]["code"]),
                         ("syntax_error", gap["prefix"] + " @@ " + gap["suffix"]),
                         ("unbalanced", gap["prefix"] + middle + "(" + gap["suffix"]),
                         ("undefined", gap["prefix"] + "zq_undeclared_word" + gap["suffix"]),
                         ("literal", gap["prefix"] + middle + ".5f" + gap["suffix"])):
        if sample in kinds:
            print(json.dumps({"task_id": task["id"], "sample_id": sample, "code": code}))
