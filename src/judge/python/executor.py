"""Executor: checks candidates against their references and times them, one request per line.

Started (sandboxed) by the judge; serves requests until stdin closes. Requests are JSON lines on
stdin, results JSON lines on fd 3 (the candidate's prints go to stdout/stderr and cannot corrupt
them). A result with "recycle": true asks the judge to replace this process (CUDA error, torch
monkey-patched, stray child processes).

Request: {"task_id", "nonce", "reference": path, "candidate": path, "cache_root",
          "extensions": {digest: key} (the builds the judge made for this candidate's load_inline
          calls, see ext.py), "device": "cpu"|"cuda",
          "init_seed": int, "seeds": [int...] (hidden, one per correctness trial),
          "timing_seeds": [int...], "atol": float|null, "rtol": float|null,
          "timing": bool, "warmup": int, "iters": int}
Result:  {"task_id", "nonce", "status": <failure name or "none">, "max_abs_error", "runtime_ms",
          "ref_runtime_ms", "host_ms", "message", "recycle"}

Protocol (KernelBench conventions, hardened; see DESIGN §5):
- reference and candidate are executed in separate module objects; the reference module is not
  registered in sys.modules;
- Model and ModelNew are built under the same seed, so parameters created in the same order match;
- inputs come from the reference's get_inputs() under hidden per-trial seeds;
- the candidate runs FIRST, on its own deep copy; then the reference on another copy; the
  candidate's copy must be unchanged afterwards;
- freed memory is poisoned with NaN before the candidate runs, and every output is filled with NaN
  after it was checked (an output cached across calls then fails the next trial);
- outputs must be plain torch.Tensor (no subclass) with real storage, same shape and dtype;
- allclose with per-dtype tolerance; NaN only where the reference has NaN;
- timing: CUDA events on the current stream, warm-ups, L2 flush (2x L2), persisting-L2 reset,
  device-wide synchronize before the end event, median, host-clock cross-check; the reference is
  timed on the same inputs; correctness is checked again after timing.
"""
import copy
import ctypes
import gc
import json
import math
import os
import statistics
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import ext  # noqa: E402

result_fd = os.fdopen(3, "w", buffering=1)
HARNESS_PID = os.getpid()

DEFAULT_TOL = {  # (atol, rtol); KernelBench HEAD: 1e-4 for fp32, 1e-2 for half types
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


class Fail(Exception):
    def __init__(self, status, message, recycle=False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.recycle = recycle


def emit(obj):
    if os.getpid() != HARNESS_PID:  # a forked copy of a candidate must not answer for us
        os._exit(0)
    result_fd.write(json.dumps(obj) + "\n")
    result_fd.flush()


def tail(s, n=3000):
    return s[-n:]


def classify(exc, default):
    """Maps an exception raised by candidate code to a failure class."""
    text = "%s: %s" % (type(exc).__name__, exc)
    if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "resource_limit", False
    if isinstance(exc, OSError) and getattr(exc, "errno", None) in (27, 28):  # EFBIG, ENOSPC
        return "resource_limit", False
    if isinstance(exc, (BlockingIOError,)) or "Resource temporarily unavailable" in text:
        return "resource_limit", True
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and getattr(exc, "errno", None) in (30, 1, 13)):
        return "sandbox_violation", False  # EROFS / EPERM / EACCES: wrote outside scratch etc.
    if isinstance(exc, OSError) and (getattr(exc, "errno", None) in (100, 101, 111, 113) or
                                     type(exc).__name__ in ("gaierror", "timeout", "TimeoutError")):
        return "sandbox_violation", False  # ENETDOWN / ENETUNREACH / ECONNREFUSED / EHOSTUNREACH: network
    if "CUDA error" in text or "illegal memory access" in text or "CUDA-capable" in text:
        return default, True
    return default, False


# --- tamper detection: identities of the functions the harness relies on ---

def _watched():
    spaces = [torch, torch.nn.functional, torch.Tensor, time, torch.nn.Module, torch.utils.cpp_extension]
    if torch.cuda.is_available():
        spaces += [torch.cuda, torch.cuda.Event]
    return spaces


def snapshot():
    snap = {}
    for i, ns in enumerate(_watched()):
        d = ns.__dict__ if hasattr(ns, "__dict__") else {}
        for k, v in list(d.items()):
            if callable(v):  # functions and classes; plain state (e.g. torch.cuda._initialized) may change
                snap[(i, k)] = id(v)
    return snap


def check_untampered(before, what):
    after = snapshot()
    changed = [k for k, v in before.items() if after.get(k) != v]
    if changed:  # new attributes are fine (lazy submodules); rebinding an existing one is not
        names = [str(k[1]) for k in changed[:5]]
        raise Fail("sandbox_violation", "%s modified torch/time functions: %s" % (what, ", ".join(names)),
                   recycle=True)


def children_alive():
    try:
        total = 0
        for tid in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % tid) as fh:
                total += len(fh.read().split())
        return total
    except OSError:
        return 0


# --- helpers ---

def load_module(name, path):
    module = type(sys)(name)
    module.__file__ = path
    with open(path) as fh:
        code = fh.read()
    exec(compile(code, path, "exec"), module.__dict__)
    return module


def seed_all(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def make_inputs(get_inputs, seed, device):
    """The reference's get_inputs() under a hidden seed; on CUDA built on the device directly."""
    seed_all(seed)
    if device == "cuda" and hasattr(torch, "device") and hasattr(torch.device("cuda"), "__enter__"):
        with torch.device("cuda"):
            return to_device(get_inputs(), device)
    return to_device(get_inputs(), device)


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


def clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(clone(v) for v in x)
    return copy.deepcopy(x)


def flatten(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out += flatten(v)
        return out
    return []


def same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        return bool(torch.all((a == b) | both_nan))
    return bool(torch.equal(a, b))


def poison(device):
    """Fills freed allocator memory with NaN so an uninitialized output cannot pass by luck."""
    if device == "cuda":
        free = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        n = max(free // 4, 1 << 20)
        try:
            t = torch.empty(int(n), dtype=torch.float32, device="cuda")
            t.fill_(float("nan"))
            del t
        except RuntimeError:
            pass


def scrub_outputs(out):
    for t in flatten(out):
        try:
            if t.is_floating_point():
                t.fill_(float("nan"))
            else:
                t.fill_(-123456789 if t.dtype != torch.bool else True)
        except RuntimeError:
            pass


def validate_output(out, ref_out, device):
    c, r = flatten(out), flatten(ref_out)
    if type(out) is not type(ref_out) and not (isinstance(out, (list, tuple)) and isinstance(ref_out, (list, tuple))):
        raise Fail("wrong_shape", "output is %s, reference returns %s" % (type(out).__name__, type(ref_out).__name__))
    if len(c) != len(r):
        raise Fail("wrong_shape", "output has %d tensors, reference %d" % (len(c), len(r)))
    for t in c:
        if type(t) is not torch.Tensor:
            raise Fail("wrong_value", "output is a %s, not a plain torch.Tensor" % type(t).__name__)
        if t.numel() > 0 and (t.storage().size() == 0 or t.data_ptr() == 0):
            raise Fail("wrong_value", "output tensor has no storage")
        if t.device.type != device:
            raise Fail("wrong_shape", "output is on %s, expected %s" % (t.device, device))


def compare(out, ref_out, atol, rtol):
    worst = 0.0
    for t, r in zip(flatten(out), flatten(ref_out)):
        if tuple(t.shape) != tuple(r.shape):
            raise Fail("wrong_shape", "output shape %s, expected %s" % (tuple(t.shape), tuple(r.shape)))
        if t.dtype != r.dtype:
            raise Fail("wrong_shape", "output dtype %s, expected %s" % (t.dtype, r.dtype))
        if not r.is_floating_point():
            if not torch.equal(t, r):
                raise Fail("wrong_value", "integer output differs")
            continue
        a, b = DEFAULT_TOL.get(r.dtype, (1e-4, 1e-4))
        a = atol if atol is not None else a
        b = rtol if rtol is not None else b
        ref_nan = torch.isnan(r)
        if bool(torch.any(torch.isnan(t) & ~ref_nan)):
            raise Fail("wrong_value", "output has NaN where the reference has none")
        td, rd = t.double(), r.double()
        finite = torch.isfinite(rd) & torch.isfinite(td)
        err = (td - rd).abs()
        if t.numel() > 0 and bool(torch.any(finite)):
            worst = max(worst, float(err[finite].max()))
        if not torch.allclose(t, r, atol=a, rtol=b, equal_nan=True):
            raise Fail("wrong_value", "max abs error %.3g exceeds atol=%g rtol=%g" % (worst, a, b))
    return worst


# --- timing ---

_cudart = None


def _persisting_l2_reset():
    """cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) + cudaCtxResetPersistingL2Cache()."""
    global _cudart
    if _cudart is None:
        _cudart = False
        names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
        dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
        try:
            import nvidia.cuda_runtime as ncr  # type: ignore
            dirs.append(os.path.join(list(ncr.__path__)[0], "lib"))
        except Exception:  # noqa: BLE001
            pass
        for d in [""] + dirs:
            for n in names:
                try:
                    _cudart = ctypes.CDLL(os.path.join(d, n) if d else n)
                    break
                except OSError:
                    continue
            if _cudart:
                break
    if not _cudart:
        return False
    _cudart.cudaDeviceSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(0))
    _cudart.cudaCtxResetPersistingL2Cache()
    return True


class Timer:
    def __init__(self, device):
        self.device = device
        self.flush_buf = None
        if device == "cuda":
            props = torch.cuda.get_device_properties(0)
            l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
            self.flush_buf = torch.empty(int(2 * l2) // 4 + 1, dtype=torch.float32, device="cuda")

    def time(self, fn, inputs_list, warmup, iters):
        """Median ms of fn(*inputs) over iters calls, cycling through input sets (cloned per call)."""
        for i in range(warmup):
            fn(*clone(inputs_list[i % len(inputs_list)]))
        if self.device == "cuda":
            torch.cuda.synchronize()
        ev_ms, host_ms = [], []
        for i in range(iters):
            args = clone(inputs_list[i % len(inputs_list)])
            if self.device == "cuda":
                self.flush_buf.zero_()
                _persisting_l2_reset()
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                h0 = time.perf_counter()
                start.record()
                out = fn(*args)
                torch.cuda.synchronize()  # device-wide: work on side streams is inside the window
                end.record()
                end.synchronize()
                h1 = time.perf_counter()
                ev_ms.append(start.elapsed_time(end))
                host_ms.append((h1 - h0) * 1e3)
            else:
                h0 = time.perf_counter()
                out = fn(*args)
                h1 = time.perf_counter()
                host_ms.append((h1 - h0) * 1e3)
            del out
        host = statistics.median(host_ms)
        ev = statistics.median(ev_ms) if ev_ms else host
        return ev, host


# --- one evaluation ---

def evaluate(req, state):
    device = req.get("device", "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise Fail("judge_error", "device cuda requested but torch.cuda is not available")
    ext.calls.clear()
    ext.failures.clear()
    settings = ext.Settings(dict(req, mode="load"))
    ext.install(settings)

    try:
        ref_mod = load_module("dice_reference", req["reference"])
        Model, get_inputs, get_init_inputs = ref_mod.Model, ref_mod.get_inputs, ref_mod.get_init_inputs
        seed_all(req["init_seed"])
        init_inputs = get_init_inputs()
    except Exception as e:  # noqa: BLE001
        raise Fail("judge_error", "reference failed to load: " + tail(traceback.format_exc()))

    before = snapshot()
    threads_before = threading.active_count()
    try:
        cand_mod = load_module("dice_candidate", req["candidate"])
        ModelNew = getattr(cand_mod, "ModelNew", None)
        if ModelNew is None:
            raise Fail("load_error", "candidate defines no ModelNew")
        if ext.failures:
            raise Fail("load_error", ext.failures[-1])
        seed_all(req["init_seed"])
        cand_model = ModelNew(*copy.deepcopy(init_inputs))
        cand_model = cand_model.to(device) if isinstance(cand_model, torch.nn.Module) else cand_model
    except Fail:
        raise
    except BaseException as e:  # noqa: BLE001
        status, recycle = classify(e, "load_error")
        raise Fail(status, tail(traceback.format_exc()), recycle)
    check_untampered(before, "loading the candidate")
    if ext.failures:
        raise Fail("load_error", ext.failures[-1])
    seed_all(req["init_seed"])
    ref_model = Model(*copy.deepcopy(init_inputs)).to(device)

    atol, rtol = req.get("atol"), req.get("rtol")
    worst = 0.0
    for seed in req["seeds"]:
        inputs = make_inputs(get_inputs, seed, device)
        cand_in, ref_in = clone(inputs), clone(inputs)
        poison(device)
        try:
            with torch.no_grad():
                out = cand_model(*cand_in)
            if device == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            status, recycle = classify(e, "runtime_error")
            raise Fail(status, tail(traceback.format_exc()), recycle)
        check_untampered(before, "the candidate's forward")
        with torch.no_grad():
            ref_out = ref_model(*ref_in)
        validate_output(out, ref_out, device)
        for a, b in zip(flatten(cand_in), flatten(inputs)):
            if not same_bits(a, b):
                raise Fail("input_mutated", "the candidate modified its input tensors")
        worst = max(worst, compare(out, ref_out, atol, rtol))
        scrub_outputs(out)
        scrub_outputs(ref_out)
        del out, ref_out, cand_in, ref_in
    if ext.failures:
        raise Fail("load_error", ext.failures[-1])

    res = {"max_abs_error": worst}
    if req.get("timing"):
        sets = []
        for seed in req.get("timing_seeds") or [req["seeds"][0] ^ 0x5EED]:
            sets.append(make_inputs(get_inputs, seed, device))
        timer = state.get("timer")
        if timer is None or timer.device != device:
            timer = state["timer"] = Timer(device)
        warm, iters = int(req.get("warmup", 3)), int(req.get("iters", 10))
        with torch.no_grad():
            try:
                ms, host = timer.time(cand_model, sets, warm, iters)
            except BaseException as e:  # noqa: BLE001
                status, recycle = classify(e, "runtime_error")
                raise Fail(status, tail(traceback.format_exc()), recycle)
            check_untampered(before, "the candidate's timed runs")
            ref_ms, _ = timer.time(ref_model, sets, warm, iters)
            # correctness again after timing: a cache keyed on earlier calls shows up here
            last = sets[-1]
            out = cand_model(*clone(last))
            if device == "cuda":
                torch.cuda.synchronize()
            ref_out = ref_model(*clone(last))
            validate_output(out, ref_out, device)
            worst = max(worst, compare(out, ref_out, atol, rtol))
        res.update(runtime_ms=ms, ref_runtime_ms=ref_ms, host_ms=host, max_abs_error=worst)
        if ms > host * 1.5 + 0.05:
            raise Fail("sandbox_violation", "event time %.3f ms exceeds host time %.3f ms (timer tampering?)"
                       % (ms, host), recycle=True)
    if threading.active_count() > threads_before or children_alive():
        res["recycle"] = True  # leftover threads or processes: do not reuse this executor
    return res


def main():
    state = {}
    emit({"event": "ready", "torch": torch.__version__, "cuda": torch.cuda.is_available()})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        reply = {"task_id": req.get("task_id"), "nonce": req.get("nonce"), "status": "none",
                 "max_abs_error": -1, "runtime_ms": -1, "ref_runtime_ms": -1, "host_ms": -1,
                 "message": "", "recycle": False}
        t0 = time.time()
        try:
            reply.update(evaluate(req, state))
        except Fail as f:
            reply.update(status=f.status, message=f.message, recycle=f.recycle)
        except BaseException:  # noqa: BLE001 -- the harness must answer whatever happens
            status, recycle = "runtime_error", True
            reply.update(status=status, message=tail(traceback.format_exc()), recycle=recycle)
        reply["exec_s"] = time.time() - t0
        emit(reply)
        gc.collect()
        if reply.get("recycle"):
            break
    os._exit(0)


if __name__ == "__main__":
    main()
