"""Reference process (trusted): no candidate code ever runs here.

Started by the judge (executor.cpp), one per executor slot, and kept for many evaluations. It
holds the hidden seeds' inputs and the reference outputs, and decides correctness. Requests are
JSON lines on stdin, answers JSON lines on fd 3:

  (start)  -> {"event": "ready"}
  {"cmd": "task", "reference", "init_seed", "xchg", "record_ops"}
           -> {"event": "ok"}: Model built under init_seed; its init inputs written to xchg/init.bin
  {"cmd": "stage", "seed", "record", "like"?}
           -> {"event": "ok", "ref_ms", "ref_host_ms"}: inputs of get_inputs() under the hidden seed
              written to xchg/in.bin, the reference run on them exactly as the candidate will be
              (harness.Caller, fresh tensors of the file's bits), its output kept in memory only
              (with "like", for the calibration calls made before candidate code runs, also
              written to xchg/like.bin)
  {"cmd": "check", "out_path", "atol", "rtol"}
           -> {"event": "ok", "status": "none" | failure, "max_abs_error", "message"}: the
              candidate's output file against the kept reference output

A reference that fails to load or run is the judge's problem (status judge_error), not the
candidate's.
"""
import os
import sys
import time
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import harness  # noqa: E402
from harness import Fail  # noqa: E402


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


class Reference:
    def __init__(self, device):
        self.device = device
        self.callers = {}
        self.modules = {}
        self.model = None
        self.ref_out = None

    def task(self, req):
        path = req["reference"]
        try:
            mod = self.modules.get(path)
            if mod is None:
                mod = self.modules[path] = harness.load_module("dice_reference", path)
            self.get_inputs = mod.get_inputs
            self.inputs_on_cpu = False
            harness.seed_all(int(req["init_seed"]))
            init = list(mod.get_init_inputs())
            self.xchg = req["xchg"]
            self.own_out = os.path.join(self.xchg, "ref_out.bin")
            open(self.own_out, "wb").close()
            harness.write_tensors(os.path.join(self.xchg, "init.bin"), init)
            init = harness.read_tensors(os.path.join(self.xchg, "init.bin"), "cpu")  # what the candidate gets
            harness.seed_all(int(req["init_seed"]))
            self.model = mod.Model(*init).to(self.device)
        except Exception:  # noqa: BLE001
            raise Fail("judge_error", "the reference failed to load: " + harness.tail(traceback.format_exc()))
        record = bool(req.get("record_ops"))
        if record not in self.callers:
            self.callers[record] = harness.Caller(self.device, record_ops=record)
        self.caller = self.callers[record]
        self.ref_out = None
        return {}

    def inputs_under_seed(self):
        """get_inputs() under the seed just set. On a GPU its tensors are made there (a task's inputs
        can be GiBs, which one CPU thread takes seconds to draw); a get_inputs that fails so is run
        on the CPU, as written, every time."""
        if self.device == "cpu" or self.inputs_on_cpu:
            return self.get_inputs()
        state = torch.random.get_rng_state(), torch.cuda.get_rng_state_all()
        try:
            with torch.device(self.device):
                return self.get_inputs()
        except Exception:  # noqa: BLE001
            self.inputs_on_cpu = True
            torch.random.set_rng_state(state[0])
            torch.cuda.set_rng_state_all(state[1])
            return self.get_inputs()

    def stage(self, req):
        in_path = os.path.join(self.xchg, "in.bin")
        try:
            harness.seed_all(int(req["seed"]))
            inputs = to_device(self.inputs_under_seed(), self.device)
            harness.write_tensors(in_path, list(inputs))
            h0 = time.perf_counter()
            # the candidate reads in_path into fresh tensors; so does the reference where its host time
            # counts (warm-ups and timed calls: speedup_host compares like with like); a recorded call
            # (a correctness trial, never timed) gets the same fresh tensors without reading the file
            if req.get("record"):
                args = harness.as_read(list(inputs), self.device)
            else:
                args = harness.read_tensors(in_path, self.device)
            out, ms, _ = self.caller.call(self.model, args, bool(req.get("record")))
            # the cost of writing it, as the candidate writes its own (into a file that already exists)
            harness.write_tensors_in_place(self.own_out, out)
            host_ms = (time.perf_counter() - h0) * 1e3
            os.truncate(self.own_out, 0)  # its size was the point, not its bytes
            if req.get("like"):  # calibration only (before candidate code runs): an output to hand back
                harness.write_tensors(os.path.join(self.xchg, "like.bin"), out)
        except Exception:  # noqa: BLE001
            raise Fail("judge_error", "the reference failed to run: " + harness.tail(traceback.format_exc()))
        self.ref_out = out
        return {"ref_ms": ms, "ref_host_ms": host_ms}

    def check(self, req):
        if self.ref_out is None:
            raise Fail("judge_error", "check before stage")
        try:
            out = harness.read_tensors(req["out_path"], self.device)
            worst = harness.compare(out, self.ref_out, req.get("atol"), req.get("rtol"))
        except Fail as f:
            return {"status": f.status, "message": f.message, "max_abs_error": -1}
        finally:
            self.ref_out = None  # one check per staged input set
        return {"status": "none", "max_abs_error": worst, "message": ""}


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    torch.set_num_threads(1)
    ref = Reference(device)
    ok = lambda fn: lambda req: dict(fn(req), event="ok")  # noqa: E731
    harness.serve({"task": ok(ref.task), "stage": ok(ref.stage), "check": ok(ref.check)}, "judge_error")


if __name__ == "__main__":
    main()
