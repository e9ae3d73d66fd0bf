"""What a candidate process's start costs, stage by stage (CPU seconds of this process, user + sys).

    python tools/gpu/probe_start.py [--idle S]      one process; prints one JSON line
Run several at once to see what concurrent starts cost each (tools/gpu/judge_throughput.sh runs 16).
"""
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "judge", "python"))
marks = []


def mark(name):
    r = resource.getrusage(resource.RUSAGE_SELF)
    marks.append((name, r.ru_utime, r.ru_stime, time.monotonic()))


mark("python")
import torch  # noqa: E402
mark("import torch")
import harness  # noqa: E402
import ext  # noqa: E402,F401
mark("import harness, ext")
torch.set_num_threads(1)
torch.cuda.init()
mark("torch.cuda.init")
x = torch.ones(8, device="cuda")
mark("first tensor (context)")
caller = harness.Caller("cuda", record_ops=True)
mark("Caller (flush buffer)")
caller.call(lambda t: t * 2, (x,), record=True)
mark("warm_up (profiler, CPU ops)")
caller.call(lambda t: t * 2, (x,), record=True)
mark("second recorded call")
idle = float(sys.argv[sys.argv.index("--idle") + 1]) if "--idle" in sys.argv else 0.0
time.sleep(idle)
mark("idle %.0f s" % idle)
out = []
for (n0, u0, s0, t0), (n1, u1, s1, t1) in zip(marks, marks[1:]):
    out.append({"stage": n1, "user": round(u1 - u0, 3), "sys": round(s1 - s0, 3), "wall": round(t1 - t0, 3)})
print(json.dumps({"pid": os.getpid(), "stages": out}))
