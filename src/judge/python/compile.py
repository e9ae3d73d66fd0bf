"""Compile step: runs a candidate file once with load_inline redirected into the build cache.

Request: one JSON object on stdin
  {"candidate": path, "cache_root": dir, "toolchain": str, "light_headers": bool,
   "extra_cflags": [...], "extra_cuda_cflags": [...]}
Result: one JSON line on fd 3 (stdout/stderr are the candidate's and the compiler's):
  {"status": "ok" | "compile_error" | "load_error" | "resource_limit", "calls": [...], "log": str}
Before a build starts, {"event": "building", "key": ...} is written to fd 3, so the judge can tell a
build timeout from a candidate that hangs in its own module-level code.
"""
import json
import os
import sys
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

result_fd = os.fdopen(3, "w", buffering=1)
HARNESS_PID = os.getpid()


def emit(obj):
    if os.getpid() != HARNESS_PID:  # a forked copy of a candidate must not speak for us
        os._exit(0)
    result_fd.write(json.dumps(obj) + "\n")
    result_fd.flush()


def tail(s, n=4000):
    return s[-n:]


def main():
    req = json.loads(sys.stdin.readline())
    import torch  # noqa: F401  (import before the candidate so its failures are not ours)
    import ext

    settings = ext.Settings(dict(req, mode="build"))
    real_build = ext._build

    def announced_build(norm, key, s):
        emit({"event": "building", "key": key})
        return real_build(norm, key, s)

    ext._build = announced_build
    ext.install(settings)
    with open(req["candidate"]) as fh:
        code = fh.read()
    module = type(sys)("dice_candidate")
    module.__file__ = req["candidate"]
    try:
        exec(compile(code, req["candidate"], "exec"), module.__dict__)
        status, log = "ok", ""
        if not ext.calls:
            status, log = "ok", "candidate made no load_inline call"
    except ext.BuildError as e:
        status, log = "compile_error", e.log
    except MemoryError:
        status, log = "resource_limit", traceback.format_exc()
    except OSError as e:
        status = "resource_limit" if e.errno == 27 else "load_error"  # EFBIG: file size limit
        log = traceback.format_exc()
    except BaseException:  # noqa: BLE001 -- anything the candidate raises is its failure
        status, log = "load_error", traceback.format_exc()
    if ext.failures and status != "compile_error":  # a build failed but the candidate swallowed it
        status, log = "compile_error", ext.failures[-1]
    emit({"status": status, "calls": ext.calls, "log": tail(log)})


if __name__ == "__main__":
    main()
    os._exit(0)  # do not run candidate atexit hooks or wait for its threads
