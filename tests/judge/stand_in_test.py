"""The compile step under the stand-in for torch (stubtorch.py, compile.py).

compile.py is driven as the judge drives it (request on stdin, build requests and the result on
fd 3), with the stand-in on every built-in CPU and CUDA solution and every test candidate, and
also with `import torch` on every test candidate and a third of the solutions. Checked: each module either ran through under the stand-in and asked for
exactly the builds (digests and normalised calls) the real run asks for, with the same status, or it
escaped and ran again with the real torch; the built-in solutions all run under the stand-in (or it
buys nothing); a module that needs torch's values, that catches the escape, or that passes a torch
value to load_inline runs with the real torch; a failed build is compile_error under both; an
answered build's record names the cache entry.  usage: python3 stand_in_test.py"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
COMPILE = os.path.join(ROOT, "src", "judge", "python", "compile.py")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def compile_step(path, stand_in, cache_root, answer):
    """Runs compile.py on path: (build requests [(digest, request)], result). answer(request) -> reply."""
    r3, w3 = os.pipe()
    p = subprocess.Popen([sys.executable, COMPILE], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, close_fds=False, preexec_fn=lambda: os.dup2(w3, 3))
    os.close(w3)
    p.stdin.write((json.dumps({"candidate": path, "cache_root": cache_root, "stand_in": stand_in}) + "\n").encode())
    p.stdin.flush()
    builds, result = [], None
    with os.fdopen(r3) as fd3:
        for line in fd3:
            j = json.loads(line)
            if j.get("event") == "build":
                builds.append((j["digest"], j["request"]))
                p.stdin.write((json.dumps(answer(j["request"])) + "\n").encode())
                p.stdin.flush()
            elif "status" in j:
                result = j
                break
    p.stdin.close()
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=120)
    if result is None:
        print(err[-2000:])
    return builds, result


def failed_build(request):
    return {"status": "compile_error", "log": "fake: not built"}


def both(path, answer=failed_build, cache_root="/nonexistent"):
    return compile_step(path, True, cache_root, answer), compile_step(path, False, cache_root, answer)


def main():
    work = tempfile.mkdtemp(prefix="dice_stand_in_")
    paths = []
    for name in ("builtin_cpu", "builtin_cuda"):
        with open(os.path.join(ROOT, "configs", "tasks", name + ".jsonl")) as fh:
            for i, line in enumerate(fh):
                t = json.loads(line)
                p = os.path.join(work, "%s_%02d.py" % (name, i))
                with open(p, "w") as out:
                    out.write(t["solution"])
                paths.append(("builtin", p, i % 3 == 0))
    cdir = os.path.join(HERE, "candidates")
    for n in sorted(os.listdir(cdir)):
        if n.endswith(".py") and "fork_bomb" not in n and "infinite_loop" not in n and "huge_alloc" not in n:
            paths.append(("candidate", os.path.join(cdir, n), True))

    under_stand_in = {"builtin": 0, "candidate": 0}
    total = {"builtin": 0, "candidate": 0}
    for kind, p, compare in paths:  # every solution under the stand-in; a third of them also with torch
        b1, r1 = compile_step(p, True, "/nonexistent", failed_build)
        name = os.path.basename(p)
        total[kind] += 1
        check(r1 is not None, name + ": a result under the stand-in")
        if r1 is not None and r1["torch"] == "stand-in":
            under_stand_in[kind] += 1
        if r1 is None or not compare:
            continue
        b2, r2 = compile_step(p, False, "/nonexistent", failed_build)
        check(r2 is not None, name + ": a result with torch")
        if r2 is None:
            continue
        check(r2["torch"] == "real", name + ": stand_in=false imports torch")
        if r1["torch"] == "stand-in":
            check(b1 == b2, name + ": the same build requests under the stand-in as with torch")
            check(r1["status"] == r2["status"], "%s: status %s under the stand-in, %s with torch" %
                  (name, r1["status"], r2["status"]))
        else:
            check(r1["torch"] == "real" and r1.get("escaped"), name + ": escaped, with a reason, and ran with torch")
            check(r1["status"] == r2["status"], name + ": the same status after the escape")
            check(b1[len(b1) - len(b2):] == b2, name + ": the real run after the escape asks for the same builds")
    print("under the stand-in: %d of %d built-in solutions, %d of %d test candidates" % (
        under_stand_in["builtin"], total["builtin"], under_stand_in["candidate"], total["candidate"]))
    check(under_stand_in["builtin"] == total["builtin"], "every built-in solution runs under the stand-in")

    def write(name, text):
        p = os.path.join(work, name)
        with open(p, "w") as fh:
            fh.write(text)
        return p

    head = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
    call = "ext = load_inline(name='x', cpp_sources=['int f() { return %s; }'], functions=['f'], extra_cflags=[%s])\n"
    cases = {
        "needs_value.py": (head + call % ("1", "'-DT=%d' % torch.get_num_threads()"), "real"),
        "catches_escape.py": (head + "try:\n    torch.float32\nexcept BaseException:\n    pass\n" + call % ("1", "'-O2'"), "real"),
        "tensor_flag.py": (head + call % ("1", "torch.Tensor"), "real"),
        "branches.py": (head + "if nn.Linear:\n    pass\n" + call % ("1", "'-O2'"), "real"),
        # what torch's objects have beyond a name: only the real ones can say (no AttributeError here)
        "asks_dunder.py": (head + "NAME = nn.Linear.__name__\n" + call % ("1", "'-O2'"), "real"),
        "module_attr.py": (head + "REG = nn.Module.register_buffer\n" + call % ("1", "'-O2'"), "real"),
        "plain.py": (head + call % ("2", "'-O2'") + "class ModelNew(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
                     "        return ext.f() + x\n", "stand-in"),
        "annotated.py": (head + "from typing import List, Optional, Tuple\n" + call % ("3", "'-O2'") +
                         "class ModelNew(nn.Module):\n    def forward(self, x: Optional[torch.Tensor], y: List[torch.Tensor]"
                         ", m: Optional[nn.Module] = None) -> Tuple[torch.Tensor, int]:\n        return x\n", "stand-in"),
    }
    for name, (text, expect) in cases.items():
        (b1, r1), (b2, r2) = both(write(name, text))
        check(r1 is not None and r1["torch"] == expect, "%s: ran with %s torch (%s)" % (name, expect, r1))
        check(r1 is not None and r1["status"] == "compile_error" == r2["status"], name + ": compile_error (failed build) both ways")
        check(len(b2) == 1 and b1[-1] == b2[0], name + ": the same build request as with torch")
    check("get_num_threads" not in json.dumps(both(write("x.py", cases["needs_value.py"][0]))[0][0]), "no torch value reached a request")

    # An answered build: the call's record names the cache entry the judge answered with.
    cache = os.path.join(work, "cache")
    os.makedirs(os.path.join(cache, "k1"))
    with open(os.path.join(cache, "k1", "meta.json"), "w") as fh:
        json.dump({"name": "dice_k1", "header": "fast", "so": "dice_k1.so"}, fh)
    builds, r = compile_step(write("plain2.py", cases["plain.py"][0]), True, cache,
                             lambda req: {"status": "ok", "key": "k1", "cache_hit": False, "seconds": 1.5})
    check(r is not None and r["status"] == "ok" and r["torch"] == "stand-in", "answered build: ok under the stand-in (%s)" % r)
    if r is not None and r.get("calls"):
        c = r["calls"][0]
        check(c["key"] == "k1" and c["name"] == "dice_k1" and c["so"] == os.path.join(cache, "k1", "dice_k1.so")
              and c["digest"] == builds[0][0] and c["cache_hit"] is False, "the call's record: %s" % c)
    else:
        check(False, "answered build: one call recorded")

    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("stand-in: all checks passed")


if __name__ == "__main__":
    main()
