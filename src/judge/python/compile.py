"""Compile step: runs a candidate file once, with load_inline turned into build requests to the judge.

Request: one JSON object on stdin
  {"candidate": path, "cache_root": dir}
For each load_inline call: {"event": "build", "digest": ..., "request": normalised call} on fd 3; the
judge builds it (in a separate sandboxed builder: this process runs candidate code, so it never
builds and cannot write the cache) and answers one JSON line on stdin,
  {"status": "ok", "key": ..., "cache_hit": bool, "seconds": float} or {"status": ..., "log": str};
the module is then imported from <cache_root>/<key>/.
Result: one JSON line on fd 3 (stdout/stderr are the candidate's):
  {"status": "ok" | "compile_error" | "load_error" | "resource_limit", "calls": [...], "log": str,
   "torch": "stand-in" | "real", "escaped": why the stand-in was not enough}

The module runs first under a stand-in for torch (stubtorch.py: no `import torch`, about 3 s of CPU
less per candidate); a module that needs more of torch than the stand-in serves runs again with the
real torch, from the start.
"""
import json
import os
import sys
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import stubtorch  # noqa: E402
from extflags import BuildError  # noqa: E402

result_fd = os.fdopen(3, "w", buffering=1)
HARNESS_PID = os.getpid()


def emit(obj):
    if os.getpid() != HARNESS_PID:  # a forked copy of a candidate must not speak for us
        os._exit(0)
    result_fd.write(json.dumps(obj) + "\n")
    result_fd.flush()


def tail(s, n=4000):
    return s[-n:]


REPLIES = os.dup(0)  # the judge's lines, on a descriptor the candidate does not know about
_pending = [b""]


def read_line():
    """One JSON line from the judge (unbuffered reads: nothing is taken from the next line)."""
    buf = _pending[0]
    while b"\n" not in buf:
        chunk = os.read(REPLIES, 65536)
        if not chunk:
            return {"status": "load_error", "log": "the judge closed the build channel"}
        buf += chunk
    line, _pending[0] = buf.split(b"\n", 1)
    return json.loads(line)


def run_module(path, code, calls, failures):
    """Runs the candidate's module once: (status, log)."""
    module = type(sys)("dice_candidate")
    module.__file__ = path
    try:
        exec(compile(code, path, "exec"), module.__dict__)
        status, log = "ok", ""
        if not calls:
            status, log = "ok", "candidate made no load_inline call"
    except stubtorch.Escape:
        raise
    except BuildError as e:
        status, log = "compile_error", e.log
    except MemoryError:
        status, log = "resource_limit", traceback.format_exc()
    except OSError as e:
        status = "resource_limit" if e.errno == 27 else "load_error"  # EFBIG: file size limit
        log = traceback.format_exc()
    except BaseException:  # noqa: BLE001 -- anything the candidate raises is its failure
        status, log = "load_error", traceback.format_exc()
    if failures and status != "compile_error":  # a build failed but the candidate swallowed it
        status, log = "compile_error", failures[-1]
    return status, log


def main():
    os.nice(10)  # batch work, like the builds: the executors' processes go first
    req = read_line()
    with open(req["candidate"]) as fh:
        code = fh.read()

    def request_build(digest, norm):
        emit({"event": "build", "digest": digest, "request": norm})
        return read_line()

    if req.get("stand_in", True):
        stubtorch.install(request_build, req["cache_root"])
        try:
            status, log = run_module(req["candidate"], code, stubtorch.calls, stubtorch.failures)
        except stubtorch.Escape:
            if not stubtorch.escaped:  # raised by the module itself
                stubtorch.escaped.append("the module raised the stand-in's escape")
        if not stubtorch.escaped:
            emit({"status": status, "calls": stubtorch.calls, "log": tail(log), "torch": "stand-in"})
            return
        stubtorch.uninstall()
    import torch  # noqa: F401  (import before the candidate so its failures are not ours)
    import ext

    ext.install(ext.Settings(dict(req, mode="capture")), request_build)
    status, log = run_module(req["candidate"], code, ext.calls, ext.failures)
    emit({"status": status, "calls": ext.calls, "log": tail(log), "torch": "real",
          "escaped": stubtorch.escaped[0] if stubtorch.escaped else ""})


if __name__ == "__main__":
    main()
    os._exit(0)  # do not run candidate atexit hooks or wait for its threads
