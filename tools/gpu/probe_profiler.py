"""What the first op record costs in a fresh CUDA process, by recorder (CPU seconds, user + sys).

    python tools/gpu/probe_profiler.py kineto|legacy|none
"""
import json
import resource
import sys
import time

marks = []


def mark(name):
    r = resource.getrusage(resource.RUSAGE_SELF)
    marks.append((name, r.ru_utime + r.ru_stime, time.monotonic()))


mark("start")
import torch  # noqa: E402
mark("import torch")
DEV = sys.argv[2] if len(sys.argv) > 2 else "cuda"
x = torch.ones(8, device=DEV)
torch.cuda.synchronize() if DEV == "cuda" else None
mark("context")
how = sys.argv[1]
names = []
for k in range(2):
    if how == "kineto":
        from torch.profiler import ProfilerActivity, profile
        p = profile(activities=[ProfilerActivity.CPU])
    elif how == "legacy":
        p = torch.autograd.profiler.profile(use_kineto=False)
    else:
        p = None
    mark("construct %d" % k)
    if p is not None:
        p.__enter__()
    mark("enter %d" % k)
    y = torch.mm(x.view(2, 4), x.view(4, 2)) * 2
    if p is not None:
        p.__exit__(None, None, None)
    mark("exit %d" % k)
    if p is not None:
        ev = list(p.events() if hasattr(p, "events") else p.function_events)
        names = sorted(set(e.name for e in ev))
        parents = sum(1 for e in ev if e.cpu_parent is not None)
    mark("events %d" % k)
out = [{"stage": b[0], "cpu": round(b[1] - a[1], 3), "wall": round(b[2] - a[2], 3)} for a, b in zip(marks, marks[1:])]
print(json.dumps({"how": how, "stages": out, "names": names}))
