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
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import torch
import torch.utils.cpp_extension as cppext

from extflags import (BuildError, ask_build, digest_of, forbidden_flag, kernel_names,  # noqa: F401
                      load_inline_call, normalize, pybind_main)

PCH_RECIPE = "dice-pch-7"
PCH_HEADER = "dice_full.h"
# The fast builder's table main.cpp (dice_bind.h instead of a pybind11 module): torch/types.h is what
# kernel code uses of torch (tensors, ATen ops, TORCH_CHECK, AT_DISPATCH); a candidate that needs
# more does not compile with it and is built with load_inline's own main.cpp on the full header.
BIND_PCH_HEADER = "dice_types.h"
BIND_HEADER = "#include <torch/types.h>"
# The host part of a candidate's .cu (fastbuild.py): torch and the CUDA headers such code includes.
HOST_PCH_HEADER = "dice_cuda_host.h"
HOST_HEADERS = ["torch/extension.h", "ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAException.h",
                "ATen/ATen.h", "cuda.h", "cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "vector", "algorithm", "cmath"]
# The same on torch/types.h (what host code of a kernel uses), the .cu's own torch/extension.h left
# out; a host part that does not compile so is compiled again on HOST_PCH_HEADER.
HOST_LIGHT_PCH_HEADER = "dice_cuda_types.h"
HOST_LIGHT_HEADERS = ["torch/types.h"] + HOST_HEADERS[1:]
LIGHT_HEADER = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>"
FULL_HEADER = "#include <torch/extension.h>"
# A CUDA source's own #include of torch/extension.h (left out of the .cu with light_cuda).
_CU_EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"][ \t]*(//.*)?$', re.M)

_real_load_inline = cppext.load_inline
failures = []       # build / lookup errors, kept even when the candidate catches the exception
calls = []          # one record per load_inline call: digest, key, name, so, cache_hit, seconds, header


class ExtensionNotBuilt(RuntimeError):
    pass


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
    paths = [os.path.join(d, "main.cpp")]
    with open(paths[0], "w") as fh:
        fh.write(pybind_main(norm, header))
    if norm["cuda_sources"]:
        cuda_sources = light_cuda_sources(norm["cuda_sources"]) if light_cu else norm["cuda_sources"]
        cu = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] + cuda_sources
        paths.append(os.path.join(d, "cuda.cu"))
        with open(paths[1], "w") as fh:
            fh.write("\n".join(cu))
    return paths


_bind = {}  # the dice_bind_py module (loaded once per process)


def import_bound(name, so, binding):
    """A fast-built extension (no PyInit: a dice_bind table) as a module of its functions."""
    if binding not in _bind:
        _bind[binding] = import_so(os.path.basename(binding)[:-3], binding)
    b = _bind[binding]
    lib = b.open(so)
    mod = type(sys)(name)
    mod.__file__ = so
    for i, (fname, doc, _codes) in enumerate(b.table(lib)):
        def fn(*args, _i=i):
            return b.call(lib, _i, args)
        fn.__name__ = fn.__qualname__ = fname
        fn.__doc__ = doc
        setattr(mod, fname, fn)
    return mod


def import_so(name, so):
    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _meta(final):
    with open(os.path.join(final, "meta.json")) as fh:
        return json.load(fh)


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

    def load_inline(*args, **kwargs):
        norm = normalize(load_inline_call(*args, **kwargs))
        digest = digest_of(norm)
        rec = {"digest": digest, "cache_hit": True, "seconds": 0.0}
        if settings.mode == "capture":
            key, cache_hit, seconds = ask_build(request_build, digest, norm, failures)
            rec.update(cache_hit=cache_hit, seconds=seconds)
        else:
            key = settings.extensions.get(digest)
            if key is None:
                msg = "load_inline extension %s was not built by the compile step" % digest[:16]
                failures.append(msg)
                raise ExtensionNotBuilt(msg)
        final = os.path.join(settings.cache_root, key)
        meta = _meta(final)
        rec.update(key=key, name=meta["name"], header=meta["header"], so=os.path.join(final, meta["so"]),
                   launch_counter=bool(meta.get("launch_counter")),
                   kernel_names=sorted(kernel_names(norm["cuda_sources"])))
        calls.append(rec)
        if meta.get("binding"):  # written by the judge: its own module in its own PCH directory
            return import_bound(meta["name"], rec["so"], meta["binding"])
        return import_so(meta["name"], rec["so"])

    cppext.load_inline = load_inline
    return load_inline


# ---------------------------------------------------------------------------------------------
# Precompiled header (trusted: run by the judge, not by candidates)

def _owned_and_private(path, root_too=False):
    """Ours (or, with root_too, root's), not a link, and no one else may write it."""
    st = os.lstat(path)
    return st.st_uid in ((os.geteuid(), 0) if root_too else (os.geteuid(),)) \
        and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) and not stat.S_ISLNK(st.st_mode)


def _ninja_vars(bdir):
    text = open(os.path.join(bdir, "build.ninja")).read()
    return lambda k: (re.search(r"^%s = ?(.*)$" % k, text, re.M) or [None, ""])[1]  # noqa: E731


# Marker flags of the probe build: where torch puts a candidate's extra flags, include paths and
# linker flags in its commands (recipe.json keeps the commands with placeholders there).
_MARK_CFLAGS, _MARK_CUDA, _MARK_INC, _MARK_LD = "-DDICE_MARK_CFLAGS", "-DDICE_MARK_CUDA", "/dice_mark_inc", "-L/dice_mark_ld"


def _recipe(bdir, probe_name, cuda):
    """The compile and link commands torch used for the probe, as templates (fastbuild.py fills them)."""
    var = _ninja_vars(bdir)
    name_re = re.compile(r"-DTORCH_EXTENSION_NAME=%s\b" % re.escape(probe_name))

    def template(flags, mark):
        flags = name_re.sub("-DTORCH_EXTENSION_NAME={name}", flags)
        flags = flags.replace("-I" + _MARK_INC, "{inc}").replace("-isystem " + _MARK_INC, "{inc}")
        if mark not in flags or "{inc}" not in flags or "{name}" not in flags:
            raise RuntimeError("cannot read the probe's build commands (markers missing): " + flags)
        return flags.replace(mark, "{extra}")

    cxx = var("cxx") or "c++"
    cflags = template(var("cflags"), _MARK_CFLAGS)
    recipe = {"cpp_compile": "%s %s -c {src} -o {obj} %s" % (cxx, cflags, var("post_cflags")),
              "link": "%s {objs} %s -o {so}" % (cxx, var("ldflags").replace(_MARK_LD, "{extra}"))}
    if "{extra}" not in recipe["link"]:
        raise RuntimeError("cannot read the probe's link command: " + var("ldflags"))
    if cuda:
        cuda_cflags = template(var("cuda_cflags"), _MARK_CUDA)
        recipe["cuda_compile"] = "%s %s -c {src} -o {obj} %s" % (var("nvcc"), cuda_cflags, var("cuda_post_cflags"))
        # the host part of a .cu, compiled by g++: the .cpp flags plus the defines nvcc gets
        defines = [f for f in shlex.split(var("cuda_cflags")) if f.startswith("-D__CUDA_NO")]
        recipe["host_compile"] = "%s %s %s -c {src} -o {obj} %s" % (cxx, cflags, " ".join(defines), var("post_cflags"))
    return recipe


def make_pch(cache_root, toolchain, cuda):
    """Builds (once) and returns the PCH directory for this toolchain, or "" when g++ rejects it."""
    key = hashlib.sha256(json.dumps([PCH_RECIPE, toolchain, bool(cuda), FULL_HEADER, BIND_HEADER]).encode()).hexdigest()[:24]
    d = os.path.join(cache_root, "pch-" + key)
    ok = os.path.join(d, "ok")
    # Finished by this user, or by root (an administrator's shared pch_root, read-only to users):
    # used as it is, without the lock (ok is renamed into place last, so a finished one stays whole).
    if all(os.path.lexists(p) and _owned_and_private(p, root_too=True) for p in (d, ok)):
        return open(ok).read().strip()
    try:
        lock_fd = os.open(d + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except PermissionError:
        raise RuntimeError("pch_root %s is not writable by this user and holds no finished precompiled header "
                           "for this toolchain (its owner builds one with any judge run there)" % cache_root)
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


def _precompile(cmd_prefix, post, header_path, gch_dir, cwd):
    """g++ -x c++-header into gch_dir: one unoptimised (the load_inline default) and one -O2 variant,
    which g++ also accepts under -O1 and -O3 (candidates often pass -O3; -Os and -march=... fall back
    to the header text). Returns the running jobs."""
    os.makedirs(gch_dir, mode=0o755)
    return [subprocess.Popen("%s %s -x c++-header %s -o %s %s" % (cmd_prefix, opt, header_path,
                                                                  os.path.join(gch_dir, tag + ".gch"), post),
                             shell=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for tag, opt in (("O0", ""), ("O2", "-O2"))]


def _pch_used(cmd_prefix, post, inc_dir, header, gch_dir, cwd):
    """Whether g++ reads header from its PCH (g++ -H marks it with '! ') at -O0 and -O3."""
    test = os.path.join(cwd, "use_%s.cpp" % os.path.basename(header).replace(".", "_"))
    with open(test, "w") as fh:
        fh.write('#include "%s"\nint dice_use;\n' % header)
    for opt in ("", "-O3"):
        r = subprocess.run("%s %s -I%s -H -fsyntax-only %s %s" % (cmd_prefix, opt, inc_dir, test, post), shell=True,
                           cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0 or ("! " + gch_dir) not in r.stderr:
            return False
    return True


# The names only torch/extension.h declares (FULL_HEADER less BIND_HEADER, as g++ reads them), each
# with the names through which code reaches it: fastbuild.py takes a compile error on the light
# header as final when the candidate can reach none of them.
FULL_ONLY_NAMES = "full_only_names.txt"
_TOKEN = re.compile(r'R"([^(\s]*)\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_][A-Za-z0-9_]*'
                    r'|>>|[{}();=,\[<>]')
_TAG_WORDS = ("class", "struct", "union", "enum", "namespace")
_KEYWORDS = set("""alignas alignof asm auto bool break case catch char char16_t char32_t class const constexpr
const_cast continue decltype default delete do double dynamic_cast else enum explicit export extern false
final float for friend goto if inline int long mutable namespace new noexcept nullptr operator override
private protected public register reinterpret_cast return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned
using virtual void volatile wchar_t while __attribute__ __extension__ __restrict __restrict__""".split())


def _scope_names(text):
    """What a preprocessed header declares where code can find it without naming a class first:
    {(namespace path, name)} for macros (-dD keeps their definitions; path ()) and, at namespace
    scope (in namespace, extern "C" and unscoped enum braces; not in class or function bodies,
    parameter lists, template arguments or initializers), every name a declaration introduces: the
    word after class/struct/union/enum/namespace and the last word before ( = , ; [ or }. Inline and
    unnamed namespaces add nothing to the path. Also the using-directives {(path of the namespace
    that holds it, target names)}, the using-declarations {(path, name, target names)} and `words`:
    every word at namespace scope outside parentheses and template brackets (a superset of the names declared there,
    whatever follows them: attributes, initializers), every macro name, and every word anywhere that
    a parenthesis follows (functions declared in classes too: a hidden friend that argument-dependent
    lookup finds)."""
    names, directives, usings, words = set(), set(), set(), set()
    braces, stmt, parens, angles, path = [], [], 0, 0, []
    body = []
    for line in text.splitlines():
        if line.startswith("#"):
            m = re.match(r"#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", line)
            if m:
                names.add(((), m.group(1)))
                words.add(m.group(1))
            continue
        body.append(line)
    text = "\n".join(body)
    words.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text))
    last = None  # the previous word outside parentheses
    for m in _TOKEN.finditer(text):
        t = m.group(0)
        open_scope = all(k == "open" for k, _, _ in braces)
        if open_scope and parens == 0 and angles == 0 and (t[0].isalpha() or t[0] == "_"):
            words.add(t)
        tagged = t == "{" and any(w in _TAG_WORDS for w in stmt)  # its name is the word after the tag
        if t in "({[=,;}" and last and last not in _KEYWORDS and open_scope and parens == 0 and angles == 0 \
                and not tagged:
            if t == ";" and stmt[:1] == ["using"] and stmt[1:2] != ["namespace"] and len(stmt) > 2:
                usings.add((tuple(path), last, tuple(w for w in stmt[1:-1] if w != "typename")))
            else:
                names.add((tuple(path), last))
        if t == "(":
            parens += 1
        elif t == ")":
            parens = max(0, parens - 1)
        elif parens:
            continue
        elif t == "<":
            angles += 1
        elif t in (">", ">>"):
            angles = max(0, angles - len(t))
        elif t == "{":
            pushed, kind = 0, "closed"
            if "namespace" in stmt:
                kind = "open"
                if "inline" not in stmt:
                    inner = [w for w in stmt[stmt.index("namespace") + 1:] if w != "__attribute__"]
                    path += inner
                    pushed = len(inner)
            elif stmt[:1] == ["extern"] and len(stmt) == 2 and stmt[1].startswith('"'):
                kind = "open"
            elif "enum" in stmt and stmt[stmt.index("enum") + 1:stmt.index("enum") + 2] not in (["class"], ["struct"]):
                kind = "open"
            braces.append((kind, parens, pushed))
            stmt, angles = [], 0
        elif t == "}":
            if braces:
                _, parens, pushed = braces.pop()
                del path[len(path) - pushed:]
            stmt, angles = [], 0
        elif t == ";":
            if stmt[:2] == ["using", "namespace"] and open_scope:
                directives.add((tuple(path), tuple(stmt[2:])))
            stmt, angles = [], 0
        elif t[0] not in "\"'=,[" and not t.startswith('R"'):
            if open_scope and angles == 0 and stmt and stmt[-1] in _TAG_WORDS and t not in _KEYWORDS:
                names.add((tuple(path), t))
            stmt.append(t)
        last = t if (t[0].isalpha() or t[0] == "_") and parens == 0 else None
    return names, directives, usings, words


def _full_only_names(cmd_prefix, post, d, cwd):
    """{name: the names through which code reaches it ("" for the global scope)}: the namespace that
    declares it, and every namespace that holds a using-directive for that one."""
    seen = []
    for header in (PCH_HEADER, BIND_PCH_HEADER):
        r = subprocess.run("%s -E -dD -x c++ %s %s" % (cmd_prefix, os.path.join(d, header), post), shell=True,
                           cwd=cwd, capture_output=True, text=True, errors="replace")
        if r.returncode != 0:
            return None
        seen.append(_scope_names(r.stdout))
    (full, directives, usings, _), (light, _, _, _) = seen
    # a using-declaration of what the light header declares names the same entity: nothing new
    full = full | {(path, name) for path, name, target in usings
                   if not any(p[len(p) - len(target):] == target for p, n in light if n == name)}
    out = {}
    for path, name in full - light:
        via = {path[-1] if path else ""}
        via.update(where[-1] if where else "" for where, target in directives
                   if target and path[len(path) - len(target):] == target)
        out.setdefault(name, set()).update(via)
    return out


def write_full_only_names(cmd_prefix, post, d, cwd):
    """FULL_ONLY_NAMES in d (name<TAB>via,via; an empty via is the global scope); the names, or None
    when a header does not preprocess."""
    names = _full_only_names(cmd_prefix, post, d, cwd)
    if names is not None:
        with open(os.path.join(d, FULL_ONLY_NAMES), "w") as fh:
            fh.write("".join("%s\t%s\n" % (n, ",".join(sorted(v))) for n, v in sorted(names.items())))
    return names


# What the plain build of a .cu reads before the candidate's text (load_inline's cuda.cu prelude and
# the torch headers a candidate's .cu may include itself), and every word that text can make a
# name reachable by at namespace scope or as a macro, as nvcc's host pass preprocesses it (the pass
# that parses every function body, device code too): fastbuild.py takes a device part's
# `identifier "X" is undefined` as the candidate's compile error when X is none of these words.
CUDA_REACHABLE = "cuda_reachable_words.json"
CUDA_PRELUDE_HEADERS = ["torch/types.h", "torch/torch.h"] + HOST_HEADERS


def write_cuda_reachable_words(cuda_prefix, cuda_post, d, cwd):
    """CUDA_REACHABLE in d: {"headers": the includes it covers, "words": [...], "macros": the macros
    these headers define beyond cuda.h and cuda_runtime.h (which the device part includes too),
    "count_changing_macros" / "arg_sensitive_macros": the macros of the preprocessed text whose use
    could change a text's bracket counts always / through unbalanced arguments (fastbuild.macro_classes),
    "included": the header files it read};
    False when nvcc cannot preprocess even torch/types.h with cuda.h and cuda_runtime.h."""
    import fastbuild  # noqa: E402 -- torch-free, beside this file
    src = os.path.join(cwd, "dice_reachable.cu")

    def preprocessed(headers):
        with open(src, "w") as fh:
            fh.write("".join("#include <%s>\n" % h for h in headers))
        r = subprocess.run("%s -E -Xcompiler -dD %s %s" % (cuda_prefix, src, cuda_post), shell=True, cwd=cwd,
                           capture_output=True, text=True, errors="replace")
        return r.stdout if r.returncode == 0 and r.stdout else None

    def macros(text):
        return set(re.findall(r"^#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.M))

    base = preprocessed(["cuda.h", "cuda_runtime.h"])
    if base is None:
        return False
    for headers in (CUDA_PRELUDE_HEADERS, ["torch/types.h", "torch/extension.h", "cuda.h", "cuda_runtime.h"],
                    ["torch/types.h", "cuda.h", "cuda_runtime.h"]):
        text = preprocessed(headers)
        if text is not None:
            classes = fastbuild.macro_classes(text)
            with open(os.path.join(d, CUDA_REACHABLE), "w") as fh:
                json.dump({"headers": headers, "words": sorted(_scope_names(text)[3]),
                           "macros": sorted(macros(text) - macros(base)),
                           "count_changing_macros": sorted(n for n, c in classes.items() if c == "body"),
                           "arg_sensitive_macros": sorted(n for n, c in classes.items() if c == "args"),
                           "included": sorted(set(re.findall(r'^# \d+ "([^"<][^"]*)"', text, re.M)))}, fh)
            return True
    return False


def _plain_command(template):
    """A recipe compile command without the module name, include paths and extra flags, split around
    its source: (what comes before `-c {src}`, what comes after it less `-o {obj}`)."""
    prefix, post = template.split(" -c {src}", 1)
    plain = prefix.replace("-DTORCH_EXTENSION_NAME={name}", "").replace("{inc}", "").replace("{extra}", "")
    return plain, post.replace(" -o {obj}", "", 1)


def _build_binding(d, key, cuda):
    """dice_bind_py (the one pybind11 module that calls fast-built extensions) and dice_bind.h
    (what their main.cpp includes) in the PCH directory; the module's path, or "" when it does not
    build (fast builds then keep load_inline's pybind11 main.cpp)."""
    here = os.path.dirname(os.path.abspath(__file__))
    bdir = os.path.join(d, "bind")
    os.makedirs(bdir, mode=0o755)
    shutil.copy(os.path.join(here, "dice_bind.h"), os.path.join(d, "dice_bind.h"))
    name = "dice_bind_py_%s" % key[:12]
    try:
        cppext.load(name, [os.path.join(here, "dice_bind_py.cpp")], extra_include_paths=[d], build_directory=bdir,
                    verbose=False, with_cuda=bool(cuda), is_python_module=True)
    except Exception:  # noqa: BLE001 -- no binding module: fast builds keep the pybind11 main.cpp
        return ""
    so = os.path.join(bdir, name + ".so")
    return so if os.path.exists(so) else ""


class _NinjaWritten(Exception):
    """Raised in place of torch's ninja run: the probe's build.ninja is written, nothing is built."""


def _write_probe_ninja(name, srcs, bdir, cuda):
    """torch's build.ninja for the probe extension in bdir: the compile and link commands are all the
    recipe needs, so torch's ninja run is held back (saves one full-header compile, ~20 s on 2 cores,
    and the probe's nvcc compile with --cuda). Where this torch has no _run_ninja_build to hold back,
    or the file did not appear, the probe is built as before."""
    kwargs = dict(build_directory=bdir, verbose=False, with_cuda=bool(cuda), is_python_module=True,
                  extra_cflags=[_MARK_CFLAGS], extra_cuda_cflags=[_MARK_CUDA], extra_ldflags=[_MARK_LD],
                  extra_include_paths=[_MARK_INC])
    run_ninja = getattr(cppext, "_run_ninja_build", None)
    if run_ninja is not None:
        def hold_back(*args, **kw):
            raise _NinjaWritten()
        cppext._run_ninja_build = hold_back
        try:
            cppext.load(name, srcs, **kwargs)
        except _NinjaWritten:
            if os.path.exists(os.path.join(bdir, "build.ninja")):
                return
        finally:
            cppext._run_ninja_build = run_ninja
    cppext.load(name, srcs, **kwargs)


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
        _write_probe_ninja(name, srcs, tmp, cuda)
        recipe = _recipe(tmp, name, cuda)
        plain, post = _plain_command(recipe["cpp_compile"])
        with open(os.path.join(d, PCH_HEADER), "w") as fh:
            fh.write(FULL_HEADER + "\n")
        gch = os.path.join(d, PCH_HEADER + ".gch")
        jobs = _precompile(plain, post, os.path.join(d, PCH_HEADER), gch, tmp)
        with open(os.path.join(d, BIND_PCH_HEADER), "w") as fh:
            fh.write(BIND_HEADER + "\n")
        bind_gch = os.path.join(d, BIND_PCH_HEADER + ".gch")
        bind_jobs = _precompile(plain, post, os.path.join(d, BIND_PCH_HEADER), bind_gch, tmp)
        host_jobs, host_dir = [], os.path.join(d, "host")
        host_ok = False
        if cuda:  # a second header for fastbuild.py's host part, with the .cu's defines
            os.makedirs(host_dir, mode=0o755)
            hplain = _plain_command(recipe["host_compile"])[0]
            with open(os.path.join(host_dir, HOST_PCH_HEADER), "w") as fh:
                fh.write("".join("#include <%s>\n" % h for h in HOST_HEADERS))
            host_jobs = _precompile(hplain, post, os.path.join(host_dir, HOST_PCH_HEADER),
                                    os.path.join(host_dir, HOST_PCH_HEADER + ".gch"), tmp)
            with open(os.path.join(host_dir, HOST_LIGHT_PCH_HEADER), "w") as fh:
                fh.write("".join("#include <%s>\n" % h for h in HOST_LIGHT_HEADERS))
            light_jobs = _precompile(hplain, post, os.path.join(host_dir, HOST_LIGHT_PCH_HEADER),
                                     os.path.join(host_dir, HOST_LIGHT_PCH_HEADER + ".gch"), tmp)
        if not cuda:
            light_jobs = []
        errors = [j.communicate()[1] for j in jobs + host_jobs + bind_jobs + light_jobs]  # all at once: ~30-40 s each
        for j, err in zip(jobs, errors):
            if j.returncode != 0:
                raise RuntimeError("g++ could not precompile the header: " + err.decode(errors="replace")[-2000:])
        host_ok = all(j.returncode == 0 for j in host_jobs)  # without it, fast builds parse the host headers
        used = _pch_used(plain, post, d, PCH_HEADER, gch, tmp)
        if not used:
            shutil.rmtree(gch)
            return False
        if cuda and host_ok and _pch_used(hplain, post, host_dir, HOST_PCH_HEADER,
                              os.path.join(host_dir, HOST_PCH_HEADER + ".gch"), tmp):
            recipe["host_pch"] = host_dir
            light_gch = os.path.join(host_dir, HOST_LIGHT_PCH_HEADER + ".gch")
            if all(j.returncode == 0 for j in light_jobs) and _pch_used(hplain, post, host_dir, HOST_LIGHT_PCH_HEADER,
                                                                         light_gch, tmp):
                recipe["host_light"] = HOST_LIGHT_PCH_HEADER
        binding = _build_binding(d, key, cuda)
        if binding:
            recipe["binding"] = binding
            # the table's main.cpp reads torch/types.h from its own PCH (without it: dice_full.h)
            if all(j.returncode == 0 for j in bind_jobs) and _pch_used(plain, post, d, BIND_PCH_HEADER, bind_gch, tmp):
                recipe["bind_header"] = BIND_PCH_HEADER
                if write_full_only_names(plain, post, d, tmp) is not None:
                    recipe["full_only_names"] = FULL_ONLY_NAMES
        try:  # without it every device part that fails goes to the plain build (slower, same verdicts)
            if cuda and recipe.get("cuda_compile") and \
                    write_cuda_reachable_words(*_plain_command(recipe["cuda_compile"]), d, tmp):
                recipe["cuda_reachable_words"] = CUDA_REACHABLE
        except (OSError, ValueError, ImportError, subprocess.SubprocessError):
            pass
        with open(os.path.join(d, "recipe.json"), "w") as fh:  # the fast builder's commands
            json.dump(recipe, fh, indent=1)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _builder_main():
    """`ext.py build`: one extension from a judge request (stdin) into this scratch dir; result on fd 3."""
    out = os.fdopen(3, "w", buffering=1)
    os.nice(10)  # builds are batch work: the executors' candidate and reference processes go first
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
    os.nice(10)
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
