"""Baseline for `dice bench judge`: a KernelBench-style one-candidate-per-process evaluation.

What KernelBench's eval_kernel_against_ref does, in our own words: the reference and the candidate
are exec'd into ONE namespace, load_inline builds in place (TORCH_EXTENSIONS_DIR is a fresh
directory: no cache), Model and ModelNew are built under the same seed, the reference runs first
on each trial, then the candidate on the same inputs, outputs are compared with allclose, and the
candidate (and reference) are timed with CUDA events. No sandbox.

usage: python oneshot.py REFERENCE CANDIDATE DEVICE TRIALS TIMING(0|1)
prints one JSON line: {"compiled", "correct", "runtime_ms", "ref_runtime_ms", "error", "seconds"}
"""
import json
import statistics
import sys
import time
import traceback

t_start = time.time()
ref_path, cand_path, device, trials, timing = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
import torch  # noqa: E402

TOL = {torch.float32: 1e-4, torch.float64: 1e-7, torch.float16: 1e-2, torch.bfloat16: 1e-2}
out = {"compiled": False, "correct": False, "runtime_ms": -1, "ref_runtime_ms": -1, "error": ""}


def seed(s):
    torch.manual_seed(s)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(s)


def timed(model, inputs):
    for _ in range(3):
        model(*inputs)
    ts = []
    for _ in range(10):
        if device == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            model(*inputs)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            model(*inputs)
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


try:
    context = {}
    exec(compile(open(ref_path).read(), ref_path, "exec"), context)
    exec(compile(open(cand_path).read(), cand_path, "exec"), context)  # builds the extension here
    out["compiled"] = True
    init = context["get_init_inputs"]()
    seed(42)
    model = context["Model"](*init).to(device)
    seed(42)
    model_new = context["ModelNew"](*init).to(device)
    ok = True
    with torch.no_grad():
        for t in range(trials):
            seed(1000 + t)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in context["get_inputs"]()]
            ref = model(*inputs)
            got = model_new(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            tol = TOL.get(ref.dtype, 1e-4)
            if got.shape != ref.shape or not torch.allclose(got, ref, atol=tol, rtol=tol):
                ok = False
                break
        out["correct"] = ok
        if ok and timing:
            out["runtime_ms"] = timed(model_new, inputs)
            out["ref_runtime_ms"] = timed(model, inputs)
except BaseException:  # noqa: BLE001
    out["error"] = traceback.format_exc()[-1500:]
out["seconds"] = time.time() - t_start
print(json.dumps(out), flush=True)
