"""Candidate process: runs ONE candidate's ModelNew on inputs it is handed, then is thrown away.

Started sandboxed by the judge (executor.cpp) before it knows the candidate (a warm spare), as
`python runner.py DEVICE`. Nothing this process says about correctness is believed; it only
hands outputs over. Requests are JSON lines on stdin, answers JSON lines on fd 3:

  (start)  -> {"event": "ready"}
  {"cmd": "load", "candidate", "cache_root", "extensions", "init_seed", "init_path", "record_ops"}
           -> {"event": "loaded"} | {"event": "failed", "status", "message"}
  {"cmd": "cupti"} -> {"event": "cupti"}    (sent by the judge before "load" when an extension does
           not count its kernel launches: the profiler records CUDA kernels through CUPTI from then on)
  {"cmd": "call", "in_path", "out_path", "record"}
           -> {"event": "done", "ms", "input_mutated", "evidence"} | {"event": "failed", ...}
  {"cmd": "calibrate", "in_path", "out_path", "like_path"}
           -> as "call", with a model that returns the reference's output (read before the clock
              starts): sent before "load", it measures what the protocol costs in this process

Every call is the same call: fresh input tensors read from in_path (written by the trusted
reference process just before), model(*inputs) timed by harness.Caller (the op recorder on when
the judge checks for an own kernel), outputs written into out_path (the one file this process may
write outside its scratch). The judge freezes this process after each answer, checks that no
thread or child is left, and has the reference process compare out_path. Which calls are timed,
which inputs are hidden trial inputs and what the reference computed, this process never learns.
"""
import ctypes
import os
import sys
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import ext  # noqa: E402
import harness  # noqa: E402
from harness import Fail  # noqa: E402


class _ExtProxy:
    """The module load_inline returns, with each function call marked for the op recorder."""

    def __init__(self, mod):
        object.__setattr__(self, "_mod", mod)

    def __getattr__(self, name):
        value = getattr(self._mod, name)
        if callable(value) and not isinstance(value, type):
            from torch.profiler import record_function

            def call(*args, **kwargs):
                with record_function("dice_ext::" + name):
                    return value(*args, **kwargs)
            return call
        return value


def install_extensions(req):
    settings = ext.Settings(dict(req, mode="load"))
    inner = ext.install(settings)

    def load_inline(*args, **kwargs):
        return _ExtProxy(inner(*args, **kwargs))

    torch.utils.cpp_extension.load_inline = load_inline


def warm_up(device, caller):
    """Starts what the runtime starts lazily (CUDA context, profiler) before the judge counts our threads.
    The profiler records CPU ops only: CUPTI starts on the judge's "cupti" request, for candidates
    whose extensions do not count their launches."""
    x = torch.ones(8, device=device)
    caller.call(lambda t: t * 2, (x,), record=True)


def launch_counts(so):
    """(kernel names, the extension's launch counts) of a fast-built extension (fastbuild.LAUNCH_COUNTER)."""
    lib = ctypes.CDLL(so)  # already loaded: the same handle
    names = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "dice_own_kernel_names"))).decode()
    names = names.split("\n") if names else []
    return names, (ctypes.c_ulonglong * max(1, len(names))).in_dll(lib, "dice_own_launches")


def own_kernel_evidence(state):
    """After a load on a GPU: the launch counts of every extension, or CUPTI (already started by the judge)."""
    caller = state["caller"]
    caller.own_names = set().union(*[set(c.get("kernel_names", ())) for c in ext.calls])
    if caller.cupti or not caller.record_ops:
        return
    sos = list(dict.fromkeys(c["so"] for c in ext.calls))
    if not sos or not all(c.get("launch_counter") for c in ext.calls):
        raise Fail("judge_error",
                   "an extension does not count its kernel launches and the kernel recorder was not started")
    caller.counters = [launch_counts(so) for so in sos]


def load(req, state):
    ext.calls.clear()
    ext.failures.clear()
    install_extensions(req)
    device = state["device"]
    try:
        init = harness.read_tensors(req["init_path"], "cpu")
        mod = harness.load_module("dice_candidate", req["candidate"])
        model_new = getattr(mod, "ModelNew", None)
        if model_new is None:
            raise Fail("load_error", "candidate defines no ModelNew")
        if ext.failures:
            raise Fail("load_error", ext.failures[-1])
        harness.seed_all(int(req["init_seed"]))
        model = model_new(*init)
        model = model.to(device) if isinstance(model, torch.nn.Module) else model
    except Fail:
        raise
    except BaseException as e:  # noqa: BLE001
        raise Fail(harness.classify(e, "load_error"), harness.tail(traceback.format_exc()))
    if ext.failures:
        raise Fail("load_error", ext.failures[-1])
    state["model"] = model
    state["caller"].record_ops = bool(req.get("record_ops"))
    if device == "cuda":
        own_kernel_evidence(state)


def call(req, state, model=None):
    device = state["device"]
    inputs = harness.read_tensors(req["in_path"], device)
    before = [t.clone() for t in harness.flatten(inputs)]
    try:
        out, ms, evidence = state["caller"].call(model or state["model"], inputs, bool(req.get("record")))
    except Fail:
        raise
    except BaseException as e:  # noqa: BLE001
        raise Fail(harness.classify(e, "runtime_error"), harness.tail(traceback.format_exc()))
    mutated = any(not harness.same_bits(a, b) for a, b in zip(harness.flatten(inputs), before))
    harness.write_tensors_in_place(req["out_path"], out)
    return {"event": "done", "ms": ms, "input_mutated": mutated, "evidence": evidence}


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.init()
    state = {"device": device, "caller": harness.Caller(device, record_ops=True)}
    warm_up(device, state["caller"])

    def calibrate(req):  # before any candidate code: what the protocol itself costs here
        like = harness.read_tensors(req["like_path"], device)
        return call(req, state, model=lambda *args: like)

    def cupti(req):  # before any candidate code: CUDA kernels recorded by the profiler from now on
        state["caller"].cupti = True
        warm_up(device, state["caller"])
        return {"event": "cupti"}

    harness.serve({"load": lambda req: (load(req, state), {"event": "loaded"})[1],
                   "cupti": cupti,
                   "call": lambda req: call(req, state),
                   "calibrate": calibrate}, "runtime_error")


if __name__ == "__main__":
    main()
