"""load_inline arguments as the judge sees them, without importing torch (ext.py, fastbuild.py).

normalize(kwargs) -> the normalised call (the bytes a build's cache key is computed from);
forbidden_flag(norm) -> the first compiler/linker flag that is not allowed, or None.
pybind_main(norm, header) -> the text of load_inline's main.cpp (with `header` first).
digest_of(norm) -> SHA-256 of the normalised call (names a call inside one candidate).
load_inline_call(*args, **kwargs) -> load_inline's arguments that decide the build, by name.
kernel_names(sources) -> the names of the __global__ functions a source defines or declares.
"""
import hashlib
import json
import re


class BuildError(RuntimeError):
    """A build the judge was asked for failed (raised from load_inline in the compile step)."""

    def __init__(self, log):
        super().__init__("extension build failed")
        self.log = log


def digest_of(norm):
    return hashlib.sha256(json.dumps(norm, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()


def kernel_names(sources):
    """Names of the kernels (`__global__` functions) in CUDA sources, comments left out."""
    names = set()
    for src in sources:
        text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)
        text = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", text)
        names.update(re.findall(r"\b__global__\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", text))
    return names


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


def ask_build(request_build, digest, norm, failures):
    """The compile step's build request to the judge: (key, cache_hit, seconds), or BuildError (kept in
    failures, so a candidate that catches it still has its build failure judged)."""
    reply = request_build(digest, norm)
    if reply.get("status") != "ok":
        log = reply.get("log", "the judge did not build the extension")
        failures.append(log)
        raise BuildError(log)
    return reply["key"], bool(reply.get("cache_hit", True)), float(reply.get("seconds", 0.0))


def load_inline_call(name=None, cpp_sources=None, cuda_sources=None, functions=None, extra_cflags=None,
                     extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
                     verbose=False, with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                     keep_intermediates=True, **unused):
    """torch.utils.cpp_extension.load_inline's arguments (its signature) that decide the build, by name."""
    return dict(cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                extra_include_paths=extra_include_paths, with_cuda=with_cuda,
                with_pytorch_error_handling=with_pytorch_error_handling)


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


def pybind_main(norm, header):
    """main.cpp as load_inline writes it: header, cpp_sources, a pybind11 module of the functions."""
    cpp = [header] + norm["cpp_sources"]
    if norm["functions"] is not None:
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for f, doc in norm["functions"].items():
            if norm["with_pytorch_error_handling"]:
                cpp.append('m.def("%s", torch::wrap_pybind_function(%s), "%s");' % (f, f, doc))
            else:
                cpp.append('m.def("%s", %s, "%s");' % (f, f, doc))
        cpp.append("}")
    return "\n".join(cpp)
