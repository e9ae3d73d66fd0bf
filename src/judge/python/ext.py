"""Redirects torch.utils.cpp_extension.load_inline into dice's build cache.

Installed by the harness (compile.py / runner.py) before the candidate file runs, never by the
candidate. Candidate code never builds and never writes the cache:

  capture -- the compile step (candidate module code runs): each load_inline call is sent to the
             judge as a build request {"digest", "request"}; the judge computes the cache key itself
             (sources, functions, flags, toolchain), has the extension built by a separate sandboxed
             builder that runs no candidate code (`ext.py build`), publishes it into the cache (which
             sandboxed processes can only read) and answers with the key; the module is imported
             from <cache_root>/<key>/.
  load    -- the executor: the judge passes {digest: key} for the calls the compile step made;
             a call with any other arguments raises ExtensionNotBuilt.

The digest is SHA-256 of the normalised call; it only names a call inside one candidate. Identical
calls from different candidates get the same key from the judge, so they build once.

Builder: `python ext.py build` reads {"key", "request", "settings"} on stdin, refuses compiler
options that run other programs, builds in its scratch directory and writes one JSON line to fd 3:
{"status": "ok", "so": path, "name": module name, "header": which header worked, "build_s"} or
{"status": "compile_error", "log"}. The judge copies the .so into the cache.

Precompiled header: `python ext.py make-pch CACHE_ROOT TOOLCHAIN [--cuda] [--result FILE]` (run by the
judge itself, outside the sandbox) builds <cache_root>/pch-<hash>/dice_full.h(.gch/) -- the
torch/extension.h that load_inline puts first in every .cpp -- with the exact host-compiler flags
torch uses for an extension's .cpp file, checks that g++ accepts it, and reports the directory (as
JSON, to FILE or stdout). Builds then include "dice_full.h" from there: the same text, so the same
binary, but neither that header nor a candidate's own #include <torch/extension.h> is parsed again
(g++ falls back to the text when the PCH does not fit the flags). Without it, builds try the light
headers first and fall back to the full one.

light_cuda (setting): nvcc cannot use that PCH, and a candidate's .cu file usually includes
torch/extension.h again (pybind11 and the whole C++ frontend) after load_inline's own torch/types.h.
With light_cuda the .cu is first compiled without that include; if the .cu does not compile so, it
is built again as written. Same sources otherwise, so a build that succeeds either way is the same
program.
"""
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import torch
import torch.utils.cpp_extension as cppext

PCH_RECIPE = "dice-pch-3"
PCH_HEADER = "dice_full.h"
LIGHT_HEADER = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>"
FULL_HEADER = "#include <torch/extension.h>"
# A CUDA source's own #include of torch/extension.h (left out of the .cu with light_cuda).
_CU_EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"][ \t]*(//.*)?$', re.M)

_real_load_inline = cppext.load_inline
failures = []       # build / lookup errors, kept even when the candidate catches the exception
calls = []          # one record per load_inline call: digest, key, name, so, cache_hit, seconds, header


class ExtensionNotBuilt(RuntimeError):
    pass


class BuildError(RuntimeError):
    def __init__(self, log):
        super().__init__("extension build failed")
        self.log = log


def _as_list(x):
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return [str(v) for v in x]


def _functions(functions):
    if functions is None:
        return None
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, (list, tuple)):
        return {str(f): str(f) for f in functions}
    if isinstance(functions, dict):
        return {str(k): str(v) for k, v in functions.items()}
    raise ValueError("load_inline: functions must be a list or dict, got %s" % type(functions).__name__)


def normalize(kw):
    with_cuda = kw.get("with_cuda")
    return {
        "cpp_sources": _as_list(kw.get("cpp_sources")),
        "cuda_sources": _as_list(kw.get("cuda_sources")),
        "functions": _functions(kw.get("functions")),
        "extra_cflags": _as_list(kw.get("extra_cflags")),
        "extra_cuda_cflags": _as_list(kw.get("extra_cuda_cflags")),
        "extra_ldflags": _as_list(kw.get("extra_ldflags")),
        "extra_include_paths": _as_list(kw.get("extra_include_paths")),
        "with_cuda": None if with_cuda is None else bool(with_cuda),
        "with_pytorch_error_handling": bool(kw.get("with_pytorch_error_handling", True)),
    }


def digest_of(norm):
    return hashlib.sha256(json.dumps(norm, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()


class Settings:
    def __init__(self, cfg):
        self.cache_root = cfg["cache_root"]
        self.mode = cfg.get("mode", "load")
        self.light_headers = bool(cfg.get("light_headers", True))
        self.light_cuda = bool(cfg.get("light_cuda", False))
        self.judge_cflags = list(cfg.get("extra_cflags", []))
        self.judge_cuda_cflags = list(cfg.get("extra_cuda_cflags", []))
        # {"cpp": dir, "cuda": dir}: PCH directories made by make-pch ("" or missing: none)
        self.pch = dict(cfg.get("pch") or {})
        # load mode: {digest: key} of the extensions the judge built for this candidate
        self.extensions = dict(cfg.get("extensions") or {})


def _pch_for(norm, s):
    """The PCH directory that fits this build (CUDA extensions compile their .cpp differently)."""
    d = s.pch.get("cuda" if norm["cuda_sources"] or norm["with_cuda"] else "cpp", "")
    return d if d and os.path.exists(os.path.join(d, PCH_HEADER + ".gch")) else ""


def light_cuda_sources(sources):
    """The CUDA sources without their own #include <torch/extension.h> (a comment keeps the line)."""
    return [_CU_EXTENSION_INCLUDE.sub("// dice light_cuda: torch/extension.h left out", src) for src in sources]


def cuda_error_in_log(log):
    """Whether a failed build may have failed in its .cu (worth building the .cu again as written):
    false only when ninja names main.o (the .cpp) as the one failed target."""
    failed = re.findall(r"FAILED:\s*(?:\[code=\d+\]\s*)?(\S+)", log)
    return not failed or any(os.path.basename(t) != "main.o" for t in failed)


def _write_sources(d, norm, header, light_cu=False):
    cpp = [header] + norm["cpp_sources"]
    if norm["functions"] is not None:
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for f, doc in norm["functions"].items():
            if norm["with_pytorch_error_handling"]:
                cpp.append('m.def("%s", torch::wrap_pybind_function(%s), "%s");' % (f, f, doc))
            else:
                cpp.append('m.def("%s", %s, "%s");' % (f, f, doc))
        cpp.append("}")
    paths = [os.path.join(d, "main.cpp")]
    with open(paths[0], "w") as fh:
        fh.write("\n".join(cpp))
    if norm["cuda_sources"]:
        cuda_sources = light_cuda_sources(norm["cuda_sources"]) if light_cu else norm["cuda_sources"]
        cu = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] + cuda_sources
        paths.append(os.path.join(d, "cuda.cu"))
        with open(paths[1], "w") as fh:
            fh.write("\n".join(cu))
    return paths


def import_so(name, so):
    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _meta(final):
    with open(os.path.join(final, "meta.json")) as fh:
        return json.load(fh)


# The build runs through ninja and a shell: flags may hold only these characters (no quoting,
# substitution, redirection or command separators) ...
_SAFE_FLAG = re.compile(r"^[A-Za-z0-9_\-=+.,/: ]*$")
# ... and no option that makes g++ / nvcc / the linker run or load another program, or read more
# options from a file (e.g. one of the candidate's own sources).
_FORBIDDEN = re.compile(r"^(-wrapper|-fplugin|-B(?!symbolic|static|dynamic|group|no-symbolic)|-specs|--specs|-ccbin"
                        r"|--compiler-bindir|-run|--run|--ld-path|-fuse-ld=/|--plugin|-plugin|-load|-Xclang"
                        r"|--options-file|-optf)")


def forbidden_flag(norm):
    """The first flag that is not allowed, or None (also looks inside -Xcompiler / -Wl, lists)."""
    for field in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths"):
        for flag in norm[field]:
            if not _SAFE_FLAG.match(flag) or "@" in flag:
                return flag
            parts = [flag] + re.split(r"[,\s=]+", flag)
            if field == "extra_include_paths":
                parts = [p for p in parts[1:] if p.startswith("-")]  # a path is fine, an option is not
                if parts:
                    return flag
            for part in parts:
                if part and _FORBIDDEN.match(part):
                    return flag
    return None


def build(norm, key, s, out_dir):
    """Builds one extension in out_dir (from the PCH; else light headers first, then the full header)."""
    bad = forbidden_flag(norm)
    if bad is not None:
        raise BuildError("compiler option %r is not allowed (it runs or loads another program)" % bad)
    pch = _pch_for(norm, s)
    if pch:  # FULL_HEADER (load_inline's own prelude) read from its precompiled form: fastest of all
        headers = [("full+pch", '#include "%s"' % PCH_HEADER)]
    elif s.light_headers:
        headers = [("light", LIGHT_HEADER), ("full", FULL_HEADER)]
    else:
        headers = [("full", FULL_HEADER)]
    light_cu = s.light_cuda and light_cuda_sources(norm["cuda_sources"]) != norm["cuda_sources"]
    attempts = []
    for tag, header in headers:
        if light_cu:
            attempts.append((tag + "+lightcu", header, True))
        attempts.append((tag, header, False))
    logs = []
    t0 = time.time()
    skip = set()  # header tags whose .cpp failed: building the .cu differently will not help
    for tag, header, lcu in attempts:
        base = tag[:-len("+lightcu")] if lcu else tag
        if base in skip:
            continue
        name = "dice_%s_%s%s" % (key[:20], tag[0], "c" if lcu else "")
        bdir = os.path.join(out_dir, tag.replace("+", "_"))
        os.makedirs(bdir)
        srcs = _write_sources(bdir, norm, header, light_cu=lcu)
        includes = norm["extra_include_paths"] + ([pch] if "+pch" in tag else [])
        try:
            cppext.load(name, srcs,
                        extra_cflags=norm["extra_cflags"] + s.judge_cflags,
                        extra_cuda_cflags=norm["extra_cuda_cflags"] + s.judge_cuda_cflags,
                        extra_ldflags=norm["extra_ldflags"], extra_include_paths=includes,
                        build_directory=bdir, verbose=False, with_cuda=norm["with_cuda"],
                        is_python_module=True)
        except Exception as e:  # compiler errors arrive as RuntimeError with ninja's output
            logs.append("[%s headers] %s" % (tag, e))
            if lcu and not cuda_error_in_log(str(e)):
                skip.add(base)
            continue
        return {"name": name, "so": os.path.join(bdir, name + ".so"), "header": tag, "build_s": time.time() - t0}
    raise BuildError("\n".join(logs))


def install(settings, request_build=None):
    """Replaces cpp_extension.load_inline (and torch.utils.cpp_extension's attribute) for this process.

    capture mode: request_build(digest, norm) -> {"status": "ok", "key": ...} or {"status": ..., "log": ...}.
    """

    def load_inline(name=None, cpp_sources=None, cuda_sources=None, functions=None, extra_cflags=None,
                    extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
                    verbose=False, with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                    keep_intermediates=True, **unused):
        norm = normalize(dict(cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                              extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                              extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
                              with_cuda=with_cuda, with_pytorch_error_handling=with_pytorch_error_handling))
        digest = digest_of(norm)
        rec = {"digest": digest, "cache_hit": True, "seconds": 0.0}
        if settings.mode == "capture":
            reply = request_build(digest, norm)
            if reply.get("status") != "ok":
                log = reply.get("log", "the judge did not build the extension")
                failures.append(log)
                raise BuildError(log)
            key = reply["key"]
            rec.update(cache_hit=bool(reply.get("cache_hit", True)), seconds=float(reply.get("seconds", 0.0)))
        else:
            key = settings.extensions.get(digest)
            if key is None:
                msg = "load_inline extension %s was not built by the compile step" % digest[:16]
                failures.append(msg)
                raise ExtensionNotBuilt(msg)
        final = os.path.join(settings.cache_root, key)
        meta = _meta(final)
        rec.update(key=key, name=meta["name"], header=meta["header"], so=os.path.join(final, meta["so"]))
        calls.append(rec)
        return import_so(meta["name"], rec["so"])

    cppext.load_inline = load_inline
    return load_inline


# ---------------------------------------------------------------------------------------------
# Precompiled header (trusted: run by the judge, not by candidates)

def _owned_and_private(path):
    st = os.lstat(path)
    return st.st_uid == os.geteuid() and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) \
        and not stat.S_ISLNK(st.st_mode)


def _ninja_compile_command(bdir):
    """cxx + cflags + post_cflags of the .cpp compile rule torch wrote, minus the module name."""
    text = open(os.path.join(bdir, "build.ninja")).read()
    var = lambda k: (re.search(r"^%s = ?(.*)$" % k, text, re.M) or [None, ""])[1]  # noqa: E731
    cflags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", var("cflags"))
    return var("cxx") or "c++", cflags, var("post_cflags")


def make_pch(cache_root, toolchain, cuda):
    """Builds (once) and returns the PCH directory for this toolchain, or "" when g++ rejects it."""
    key = hashlib.sha256(json.dumps([PCH_RECIPE, toolchain, bool(cuda), FULL_HEADER]).encode()).hexdigest()[:24]
    d = os.path.join(cache_root, "pch-" + key)
    ok = os.path.join(d, "ok")
    lock_fd = os.open(d + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(lock_fd) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.lexists(d) and not _owned_and_private(d):  # planted by someone else: never use it
            shutil.rmtree(d, ignore_errors=True) if not os.path.islink(d) else os.unlink(d)
        if os.path.exists(ok):
            return open(ok).read().strip()
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, mode=0o755)
        os.chmod(d, 0o755)
        try:
            used, error = _build_pch(d, key, cuda), ""
        except Exception as e:  # noqa: BLE001 -- no PCH means slower builds, never a failure
            used, error = False, "%s: %s" % (type(e).__name__, str(e)[-2000:])
        if error:  # not recorded: the next judge tries again
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(error)
        for root, dirs, files in os.walk(d):
            for x in dirs:
                os.chmod(os.path.join(root, x), 0o755)
            for x in files:
                os.chmod(os.path.join(root, x), 0o644)
        with open(ok + ".tmp", "w") as fh:  # "" when g++ refused it: not tried again
            fh.write(d if used else "")
        os.chmod(ok + ".tmp", 0o644)
        os.rename(ok + ".tmp", ok)
        return d if used else ""


def _build_pch(d, key, cuda):
    tmp = tempfile.mkdtemp(prefix="probe.", dir=d)
    os.environ["TMPDIR"] = tmp  # the compilers' temp files: the caller's TMPDIR may vanish meanwhile
    try:
        name = "dice_pch_probe_%s" % key[:12]
        srcs = [os.path.join(tmp, "main.cpp")]
        with open(srcs[0], "w") as fh:
            fh.write(FULL_HEADER + "\nint dice_probe() { return 1; }\n"
                     "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"probe\", &dice_probe); }\n")
        if cuda:
            srcs.append(os.path.join(tmp, "probe.cu"))
            with open(srcs[1], "w") as fh:
                fh.write("__global__ void dice_probe_kernel(int* p) { *p = 1; }\n")
        cppext.load(name, srcs, build_directory=tmp, verbose=False, with_cuda=bool(cuda), is_python_module=True)
        cxx, cflags, post = _ninja_compile_command(tmp)
        with open(os.path.join(d, PCH_HEADER), "w") as fh:
            fh.write(FULL_HEADER + "\n")
        # A .gch directory: g++ takes the first file in it that fits the flags. One unoptimised (the
        # load_inline default) and one -O2, which g++ also accepts under -O1 and -O3 (candidates
        # often pass extra_cflags=["-O3"]; -Os and -march=... fall back to the header text).
        gch = os.path.join(d, PCH_HEADER + ".gch")
        os.makedirs(gch, mode=0o755)
        jobs = [subprocess.Popen("%s %s %s -x c++-header %s -o %s %s" % (cxx, cflags, opt, os.path.join(d, PCH_HEADER),
                                                                         os.path.join(gch, tag + ".gch"), post),
                                 shell=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for tag, opt in (("O0", ""), ("O2", "-O2"))]  # both at once: they take ~40 s each
        errors = [j.communicate()[1] for j in jobs]
        for j, err in zip(jobs, errors):
            if j.returncode != 0:
                raise RuntimeError("g++ could not precompile the header: " + err.decode(errors="replace")[-2000:])
        # g++ -H marks a header it took from a usable PCH with "! "
        test = os.path.join(tmp, "use.cpp")
        with open(test, "w") as fh:
            fh.write('#include "%s"\nint dice_use;\n' % PCH_HEADER)
        used = True
        for opt in ("", "-O3"):
            r = subprocess.run("%s %s %s -I%s -H -fsyntax-only %s %s" % (cxx, cflags, opt, d, test, post), shell=True,
                               cwd=tmp, capture_output=True, text=True)
            used = used and r.returncode == 0 and ("! " + gch) in r.stderr
        if not used:
            shutil.rmtree(gch)
        return used
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _builder_main():
    """`ext.py build`: one extension from a judge request (stdin) into this scratch dir; result on fd 3."""
    out = os.fdopen(3, "w", buffering=1)
    try:
        job = json.loads(sys.stdin.readline())
        settings = Settings(dict(job["settings"], mode="build"))
        meta = build(normalize(job["request"]), job["key"], settings, tempfile.mkdtemp(prefix="build.", dir=os.getcwd()))
        answer = dict(meta, status="ok")
    except BuildError as e:
        answer = {"status": "compile_error", "log": e.log[-6000:]}
    except Exception as e:  # noqa: BLE001 -- a malformed request is the candidate's compile error
        answer = {"status": "compile_error", "log": "%s: %s" % (type(e).__name__, str(e)[-2000:])}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__" and len(sys.argv) >= 2 and sys.argv[1] == "build":
    _builder_main()
    os._exit(0)

if __name__ == "__main__" and len(sys.argv) >= 4 and sys.argv[1] == "make-pch":
    # make-pch CACHE_ROOT TOOLCHAIN [--cuda] [--result FILE]: the judge may stop waiting and leave this
    # running, so it never writes to its stdout/stderr pipes; the answer goes to FILE (and stdout).
    args = sys.argv[4:]
    result = args[args.index("--result") + 1] if "--result" in args else ""
    os.chdir(sys.argv[2])  # the caller's scratch (our cwd) may be removed while this runs
    if result:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    try:
        answer = {"pch": make_pch(sys.argv[2], sys.argv[3], "--cuda" in args)}
    except Exception as e:  # noqa: BLE001 -- no PCH is a slower build, not a failure
        answer = {"pch": "", "error": "%s: %s" % (type(e).__name__, str(e)[-2000:])}
    if result:
        try:
            with open(result, "w") as fh:
                json.dump(answer, fh)
        except OSError:
            pass  # the judge is gone (and its scratch with it)
    else:
        print(json.dumps(answer))
