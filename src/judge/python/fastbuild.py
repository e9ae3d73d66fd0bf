"""Fast builder: one load_inline extension without importing torch, ninja, or torch headers in nvcc.

`python fastbuild.py` reads {"key", "request", "settings"} on stdin (as `ext.py build` does) and writes
one JSON line to fd 3:
  {"status": "ok", "so", "name", "header": "fast", "build_s", "steps": {step: seconds}}
  {"status": "compile_error", "log"}   -- main.cpp failed: the plain build compiles the same text
  {"status": "fallback", "log"}        -- not understood or not built here: the judge runs the plain builder

What load_inline builds, and what this builds instead (same sources, same flags, same program):
  plain: main.cpp = <torch/extension.h> + cpp_sources + PYBIND11_MODULE   (g++)
         cuda.cu  = <torch/types.h> <cuda.h> <cuda_runtime.h> + cuda_sources (nvcc: ~50 s, almost
                    all of it the torch headers, parsed by cudafe++, cicc and the host compiler)
  fast:  main.cpp   the same functions with a dice_bind table instead of the pybind11 module, on
                    torch/types.h read from a precompiled header (a candidate that does not compile
                    so gets load_inline's main.cpp, torch/extension.h read from the precompiled header)
         device.cu  the .cu's kernels, device functions, macros and plain declarations, without the
                    torch includes and without its host functions (nvcc: a few seconds)
         host.cpp   the .cu's host functions, with every kernel declared (not defined) and every
                    launch `k<<<g, b, s, st>>>(args)` written as nvcc itself lowers it:
                    `(__cudaPushCallConfiguration(g, b, s, st)) ? (void)0 : k(args)`, where k is the
                    kernel's host stub, defined in device.o (g++, torch and CUDA host headers read
                    from a second precompiled header)
  Stubs that nvcc keeps local (static kernels, template instantiations) are made global in
  device.o (objcopy), template instantiations the host code uses are instantiated explicitly.
Anything else (an anonymous-namespace kernel, a host function that uses a __device__ variable,
an nvcc flag that has no host meaning known here, any step that fails other than main.cpp) is
answered with "fallback": the judge then builds the candidate as written, with the same verdict.

The recipe (compiler commands with the toolchain's flags) comes from the judge's PCH directory
(recipe.json, written by `ext.py make-pch` from a probe extension that torch built itself).
This module never imports torch: a build costs the compilers and nothing else.
"""
import hashlib
import json
import os
import shutil
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extflags import forbidden_flag, normalize, pybind_main  # noqa: E402

TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](torch|ATen|c10|caffe2|pybind11)/')
TORCH_NAMESPACES = {"torch", "at", "c10", "pybind11", "py", "caffe2"}
KERNEL_WORDS = {"__global__"}
LAUNCH_CONFIG = "__cudaPushCallConfiguration"


class Unsupported(Exception):
    """The fast path does not understand this candidate: build it as written instead."""


# ------------------------------------------------------------------------------------------------
# Lexer: C++ tokens with their source spans (comments dropped, preprocessor lines kept whole)

_PUNCT = ["<<<", ">>>", "...", "<<=", ">>=", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=",
          "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##"]
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_STRING_PREFIX = re.compile(r'(?:u8|u|U|L)?R?"|(?:u8|u|U|L)?\'')


class Tok:
    __slots__ = ("kind", "text", "start", "end")

    def __init__(self, kind, text, start, end):
        self.kind, self.text, self.start, self.end = kind, text, start, end

    def __repr__(self):
        return "%s:%r" % (self.kind, self.text)


def tokenize(src):
    """Tokens of `src`: kinds ident, number, string, punct, pp (a whole preprocessor directive)."""
    toks = []
    i, n = 0, len(src)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = src[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            continue
        if src.startswith("//", i):
            j = i
            while j < n and src[j] != "\n":
                j += 2 if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n" else 1
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise Unsupported("unterminated comment")
            i = j + 2
            continue
        if c == "#" and line_start:
            j = i
            while j < n and src[j] != "\n":
                if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n":
                    j += 2
                elif src.startswith("/*", j):  # a comment inside a directive may span lines
                    k = src.find("*/", j + 2)
                    if k < 0:
                        raise Unsupported("unterminated comment")
                    j = k + 2
                elif src.startswith("//", j):
                    while j < n and src[j] != "\n":
                        j += 1
                else:
                    j += 1
            toks.append(Tok("pp", src[i:j], i, j))
            i = j
            continue
        line_start = False
        m = _STRING_PREFIX.match(src, i)
        if m and (m.end() - i == 1 or not _IDENT.match(src, i) or _IDENT.match(src, i).end() == m.end() - 1):
            q = src[m.end() - 1]
            j = m.end()
            if "R" in src[i:m.end() - 1] and q == '"':
                p = src.find("(", j)
                if p < 0 or p - j > 16:
                    raise Unsupported("malformed raw string")
                close = ")" + src[j:p] + '"'
                k = src.find(close, p + 1)
                if k < 0:
                    raise Unsupported("unterminated raw string")
                j = k + len(close)
            else:
                while j < n and src[j] != q:
                    if src[j] == "\n":
                        raise Unsupported("unterminated string literal")
                    j += 2 if src[j] == "\\" else 1
                j += 1
            # a user-defined literal suffix belongs to the token
            s = _IDENT.match(src, j)
            if s:
                j = s.end()
            toks.append(Tok("string", src[i:j], i, j))
            i = j
            continue
        m = _IDENT.match(src, i)
        if m:
            toks.append(Tok("ident", m.group(), i, m.end()))
            i = m.end()
            continue
        m = _NUMBER.match(src, i)
        if m:
            toks.append(Tok("number", m.group(), i, m.end()))
            i = m.end()
            continue
        for p in _PUNCT:
            if src.startswith(p, i):
                toks.append(Tok("punct", p, i, i + len(p)))
                i += len(p)
                break
        else:
            toks.append(Tok("punct", c, i, i + 1))
            i += 1
    return toks


# ------------------------------------------------------------------------------------------------
# Top-level items

class Item:
    """A top-level piece of a source: kind pp | open | close | decl | func."""
    __slots__ = ("kind", "toks", "start", "end", "body", "scope")

    def __init__(self, kind, toks, start, end, body=None, scope=()):
        self.kind, self.toks, self.start, self.end = kind, toks, start, end
        self.body = body      # (start, end) source span of a function body's braces, or None
        self.scope = scope    # enclosing namespaces, outermost first ("" = anonymous)

    def words(self):
        return {t.text for t in self.toks if t.kind == "ident"}


_OPEN = {"(": ")", "[": "]", "{": "}"}


def _match(toks, i):
    """Index of the token closing the bracket at toks[i]."""
    want, depth = [_OPEN[toks[i].text]], 1
    j = i + 1
    while j < len(toks):
        t = toks[j].text if toks[j].kind == "punct" else None
        if t in _OPEN:
            want.append(_OPEN[t])
        elif t in (")", "]", "}"):
            if t != want[-1]:
                raise Unsupported("unbalanced brackets")
            want.pop()
            if not want:
                return j
        j += 1
    raise Unsupported("unbalanced brackets")


def split_items(src, toks=None):
    toks = tokenize(src) if toks is None else toks
    items, scope = [], []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "pp":
            items.append(Item("pp", [t], t.start, t.end, scope=tuple(scope)))
            i += 1
            continue
        if t.kind == "punct" and t.text == "}":
            if not scope:
                raise Unsupported("unbalanced braces")
            scope.pop()
            items.append(Item("close", [t], t.start, t.end, scope=tuple(scope)))
            i += 1
            continue
        if t.kind == "punct" and t.text == ";":
            i += 1
            continue
        # namespace X {  /  namespace {  /  extern "C" {  /  inline namespace X {
        j = i
        if toks[j].text == "inline" and j + 1 < len(toks) and toks[j + 1].text == "namespace":
            j += 1
        if toks[j].text == "namespace":
            k = j + 1
            name = []
            while k < len(toks) and (toks[k].kind == "ident" or toks[k].text == "::"):
                name.append(toks[k].text)
                k += 1
            if k < len(toks) and toks[k].text == "{":
                scope.append("".join(name))
                items.append(Item("open", toks[i:k + 1], t.start, toks[k].end, scope=tuple(scope[:-1])))
                i = k + 1
                continue
        if (toks[j].text == "extern" and j + 2 < len(toks) and toks[j + 1].kind == "string"
                and toks[j + 2].text == "{"):
            scope.append("extern")
            items.append(Item("open", toks[i:j + 3], t.start, toks[j + 2].end, scope=tuple(scope[:-1])))
            i = j + 3
            continue
        # a declaration or a function definition
        k = i
        saw_paren = saw_assign = False
        is_type = toks[i].text in ("class", "struct", "union", "enum", "typedef", "using")
        template_depth = 0
        while k < len(toks):
            x = toks[k]
            if x.kind == "pp":
                raise Unsupported("a preprocessor directive inside a declaration")
            if x.kind == "punct":
                if x.text == ";":
                    items.append(Item("decl", toks[i:k + 1], t.start, x.end, scope=tuple(scope)))
                    i = k + 1
                    break
                if x.text in ("(", "["):
                    if x.text == "(":
                        saw_paren = True
                    k = _match(toks, k) + 1
                    continue
                if x.text == "=" and template_depth == 0:
                    saw_assign = True
                if x.text == "<" and k > i and toks[k - 1].text == "template":
                    template_depth += 1
                elif x.text == ">" and template_depth:
                    template_depth -= 1
                if x.text in ("class", "struct", "union", "enum") and not template_depth:
                    is_type = True
                if x.text == "{":
                    close = _match(toks, k)
                    if saw_paren and not saw_assign and not is_type:
                        items.append(Item("func", toks[i:close + 1], t.start, toks[close].end,
                                          body=(x.start, toks[close].end), scope=tuple(scope)))
                        i = close + 1
                        break
                    k = close + 1
                    continue
                if x.text == "}":
                    raise Unsupported("unbalanced braces")
            elif x.kind == "ident" and x.text in ("class", "struct", "union", "enum") and not template_depth:
                is_type = True
            k += 1
        else:
            raise Unsupported("a declaration without its ';'")
    if scope:
        raise Unsupported("unbalanced braces")
    return items


# ------------------------------------------------------------------------------------------------
# The split

def _head_words(item):
    """Identifiers before the body (the declaration's own specifiers)."""
    if item.body is None:
        return item.words()
    return {t.text for t in item.toks if t.kind == "ident" and t.start < item.body[0]}


def _mentions_torch(item):
    toks = item.toks
    for a, b in zip(toks, toks[1:]):
        if a.kind == "ident" and a.text in TORCH_NAMESPACES and b.text == "::":
            return True
    w = item.words()
    if "Tensor" in w or "PYBIND11_MODULE" in w or "TORCH_LIBRARY" in w:
        return True
    if toks and toks[0].text == "using" and len(toks) > 2 and toks[1].text == "namespace":
        return True
    return False


def classify(item):
    """device | kernel | hd | host | both | devvar for a decl/func item."""
    head = _head_words(item)
    if item.kind == "func":
        if "__global__" in head:
            return "kernel"
        if "__device__" in head and "__host__" not in head:
            return "device"
        if "__device__" in head and "__host__" in head:
            return "hd"
        if "constexpr" in head and not _mentions_torch(item):
            return "both"  # --expt-relaxed-constexpr: device code may call it
        return "host"
    # declarations
    if "__global__" in head:
        return "kernel_decl"
    if head & {"__constant__", "__managed__"} or ("__device__" in head and "(" not in [t.text for t in item.toks]):
        return "devvar"
    if "__device__" in head:
        return "device"  # a __device__ function prototype
    if _mentions_torch(item) or _mutable_global(item):
        return "host"
    return "both"


def _mutable_global(item):
    """A variable defined with external linkage (one definition: it goes to the host part only)."""
    texts = [t.text for t in item.toks]
    if not texts or texts[0] in ("typedef", "using", "struct", "class", "union", "enum", "template", "static_assert",
                                 "extern", "namespace", "friend"):
        return False
    if {"constexpr", "static", "inline", "__device__", "__constant__", "__managed__"} & set(texts):
        return False
    eq = texts.index("=") if "=" in texts else len(texts)
    if "(" in texts[:eq]:
        return False  # a function prototype (or a constructor call: built the same in both parts)
    if "const" not in texts:
        return True
    name = _declared_name(item)
    if "*" in texts[:eq] or "&" in texts[:eq]:  # const binds to the pointee unless it precedes the name
        k = texts.index(name) if name in texts else -1
        return not (k > 0 and texts[k - 1] == "const")
    return False


def _launch_rewrite(src, toks, lo, hi, index):
    """`src[lo:hi]` with every `k<<<cfg>>>(args)` written as nvcc lowers it, followed by a count of the
    launch: `(PUSH(cfg)) ? (void)0 : (k(args), __dice_launched(i))`, i the kernel's entry in index
    (name -> number, shared by the calls for one source). Returns (text, kernel names launched)."""
    out, pos, names = [], lo, []
    idx = [k for k, t in enumerate(toks) if lo <= t.start < hi and t.text == "<<<"]
    done = -1  # the last token consumed by a launch
    for k in idx:
        if k <= done:
            raise Unsupported("a launch inside another launch's arguments")
        # the kernel expression before <<<: [::] name [<...>] (:: name [<...>])*
        j = k - 1
        if j >= 0 and toks[j].text in (">", ">>"):
            depth = 1 if toks[j].text == ">" else 2
            j -= 1
            while j >= 0 and depth:
                if toks[j].text == ">":
                    depth += 1
                elif toks[j].text == ">>":
                    depth += 2
                elif toks[j].text == "<":
                    depth -= 1
                elif toks[j].text in (";", "{", "}"):
                    raise Unsupported("cannot read the kernel name of a launch")
                j -= 1
            if depth:
                raise Unsupported("cannot read the kernel name of a launch")
        if j < 0 or toks[j].kind != "ident":
            raise Unsupported("a launch of something other than a named kernel")
        names.append(toks[j].text)
        while j >= 2 and toks[j - 1].text == "::" and toks[j - 2].kind == "ident":
            j -= 2
        if j >= 1 and toks[j - 1].text == "::":
            j -= 1
        start = toks[j].start
        # the configuration up to the matching >>>
        m, depth = k + 1, 0
        while m < len(toks) and not (depth == 0 and toks[m].text == ">>>"):
            if toks[m].text in ("(", "[", "{"):
                depth += 1
            elif toks[m].text in (")", "]", "}"):
                depth -= 1
            elif toks[m].text == ";":
                raise Unsupported("unterminated launch configuration")
            m += 1
        if m >= len(toks) or m + 1 >= len(toks) or toks[m + 1].text != "(":
            raise Unsupported("a launch without its argument list")
        q, depth = m + 2, 1  # the argument list's closing parenthesis
        while q < len(toks) and toks[q].start < hi:
            if toks[q].text in ("(", "[", "{"):
                depth += 1
            elif toks[q].text in (")", "]", "}"):
                depth -= 1
                if depth == 0:
                    break
            elif toks[q].text == ";":
                break
            q += 1
        if q >= len(toks) or toks[q].start >= hi or toks[q].text != ")" or depth:
            raise Unsupported("a launch whose argument list does not close")
        cfg = src[toks[k].end:toks[m].start]
        kernel = src[start:toks[k].start]
        i = index.setdefault(names[-1], len(index))
        out.append(src[pos:start])
        out.append("(%s(%s)) ? (void)0 : (%s%s, __dice_launched(%d))" % (
            LAUNCH_CONFIG, cfg.strip(), kernel.strip(), src[toks[m + 1].start:toks[q].end], i))
        pos = toks[q].end
        done = q
    out.append(src[pos:hi])
    return "".join(out), names


def _declaration_of(src, item):
    """A function item's head as a declaration (its body replaced by ';'), without `static`."""
    head = src[item.start:item.body[0]]
    head_toks = [t for t in item.toks if t.start < item.body[0]]
    cut = []
    for t in head_toks:
        if t.kind == "ident" and t.text in ("static", "inline", "__forceinline__", "__noinline__"):
            cut.append((t.start - item.start, t.end - item.start))
    for a, b in reversed(cut):
        head = head[:a] + head[b:]
    return head.rstrip() + ";"


# What starts the source's own kernels without `<<<>>>` (runtime and driver launch calls, graphs that
# replay captured launches): an extension whose host code names one has its launches counted only in
# part, so the judge records kernels with the profiler (CUPTI) for it instead. Library calls (cuBLAS,
# thrust) start library kernels, which the own-kernel rule does not count either way.
OTHER_LAUNCHES = re.compile(r"^(cuda\w*Launch\w*|cu\w*Launch\w*|\w*Graph\w*|cudaStreamBeginCapture\w*)$")


def _other_launches(text):
    """The names in text (macro bodies and literals included: a doubt means CUPTI) that start kernels
    another way than `<<<>>>`."""
    return sorted({w for w in re.findall(r"[A-Za-z_]\w*", text) if OTHER_LAUNCHES.match(w)})

# Macros nvcc defines in its host pass too, and g++ does not: a source that tests them would take
# another branch in the host part.
NVCC_ONLY_MACROS = re.compile(r"\b__(CUDACC|NVCC|CUDACC_[A-Z_]+|NVCC_[A-Z_]+)__\b")


def split_cuda(src):
    """(device_source, host_source, info) for one .cu text; raises Unsupported."""
    m = NVCC_ONLY_MACROS.search(src)
    if m:
        raise Unsupported("the source tests %s, which the host compiler does not define" % m.group(0))
    toks = tokenize(src)
    items = split_items(src, toks)
    dev, host = [], []
    kernels, templates, devvars = set(), set(), set()
    for it in items:
        text = src[it.start:it.end]
        if it.kind == "pp":
            host.append(text)
            dev.append("// [dice: torch include left out of the device part]" if TORCH_INCLUDE.match(text) else text)
            continue
        if it.kind in ("open", "close"):
            dev.append(text)
            host.append(text)
            continue
        kind = classify(it)
        name_tok = _function_name(it) if it.kind == "func" else None
        if kind == "kernel":
            if name_tok is None:
                raise Unsupported("cannot read a kernel's name")
            if "" in it.scope:  # an anonymous namespace: its stubs' names are private to each object file
                raise Unsupported("a kernel in an anonymous namespace")
            kernels.add(name_tok)
            if "template" in _head_words(it):
                templates.add(name_tok)
            dev.append(text)
            host.append(_declaration_of(src, it))
        elif kind == "kernel_decl":
            dev.append(text)
            host.append(_strip_words(src, it, ("static",)))
        elif kind == "device":
            dev.append(text)
        elif kind == "devvar":
            devvars.add(_declared_name(it))
            dev.append(text)
        elif kind == "hd":
            dev.append(text)
            head = _head_words(it)
            if head & {"template", "inline", "constexpr", "__forceinline__", "static"}:
                host.append(text)
            else:
                host.append(_declaration_of(src, it))
        elif kind == "both":
            dev.append(text)
            host.append(text)
        else:  # host
            host.append(text)
    host_src = "\n".join(host)
    # host code may not touch a __device__/__constant__ variable: its host shadow stays in device.o
    host_toks = tokenize(host_src)
    used = {t.text for t in host_toks if t.kind == "ident"}
    if used & devvars:
        raise Unsupported("host code uses a __device__ / __constant__ variable (%s)" % sorted(used & devvars)[0])
    index = {}
    host_src, launched = _launch_rewrite(host_src, host_toks, 0, len(host_src), index)
    # launches inside macros: each #define's body is rewritten the same way
    parts, pos = [], 0
    for t in tokenize(host_src):
        if t.kind == "pp" and "<<<" in t.text:
            body, names = _launch_rewrite(t.text[1:], tokenize(t.text[1:]), 0, len(t.text) - 1, index)
            parts += [host_src[pos:t.start], "#", body]
            pos = t.end
            launched += names
    host_src = "".join(parts) + host_src[pos:]
    unknown = [k for k in launched if k not in kernels]
    if unknown:
        raise Unsupported("a launch of %s, which is not a kernel of this source" % unknown[0])
    # every launch of the host part is counted, unless it can start kernels another way
    other = _other_launches(host_src)
    return "\n".join(dev), host_src, {"kernels": sorted(kernels), "templates": sorted(templates),
                                      "launches": len(launched), "counted": sorted(index, key=index.get),
                                      "uncounted": other}


def _declared_name(item):
    """The name a variable declaration declares: the identifier before its first [ = ; { ( or ,"""
    last = None
    for t in item.toks:
        if t.text in ("[", "=", ";", "{", "(", ","):
            break
        if t.kind == "ident":
            last = t.text
    return last


def _strip_words(src, item, words):
    text = src[item.start:item.end]
    for t in reversed(item.toks):
        if t.kind == "ident" and t.text in words:
            text = text[:t.start - item.start] + text[t.end - item.start:]
    return text


def _function_name(item):
    """The declared function's name: the identifier before the first '(' of the head at depth 0."""
    toks = [t for t in item.toks if item.body is None or t.start < item.body[0]]
    depth = 0
    for k, t in enumerate(toks):
        if t.text == "<":
            depth += 1
        elif t.text == ">" and depth:
            depth -= 1
        elif t.text == "(" and depth == 0 and k > 0:
            if toks[k - 1].kind == "ident" and toks[k - 1].text not in ("__launch_bounds__", "__align__",
                                                                       "__attribute__", "alignas", "__declspec"):
                return toks[k - 1].text
            if toks[k - 1].text == ")":  # __launch_bounds__(...) name(  -- keep scanning
                continue
    return None


# ------------------------------------------------------------------------------------------------
# nvcc flags that have a host meaning (the host part of a .cu was compiled by nvcc's host compiler)

_DEVICE_ONLY = re.compile(r"^(-O[0-3s]?$|--use_fast_math$|-use_fast_math$|-lineinfo$|--generate-line-info$|"
                          r"-arch(=|$)|--gpu-architecture|-gencode|--generate-code|-code(=|$)|--gpu-code|"
                          r"--expt-relaxed-constexpr$|--expt-extended-lambda$|--extended-lambda$|-maxrregcount|"
                          r"--maxrregcount|-Xptxas|--ptxas-options|-ftz|-prec-div|-prec-sqrt|-fmad|--ftz|--prec-div|"
                          r"--prec-sqrt|--fmad|-restrict$|--restrict$|--default-stream|-res-usage$|--resource-usage$|"
                          r"-w$|-Wno-deprecated-gpu-targets$|-dlto$|-src-in-ptx$|--keep$|-Xnvlink|-t[0-9]*$|--threads)")
_HOST_TOO = re.compile(r"^(-D|-U|-I|-isystem|-std=|--std=|-g$|-DNDEBUG$)")


def host_flags(cuda_flags):
    """The host compiler flags an nvcc flag list implies (-O, -D, -I, -std, -Xcompiler ...)."""
    out, args, i = [], [], 0
    for f in cuda_flags:
        args += shlex.split(f)
    while i < len(args):
        f = args[i]
        if f in ("-Xcompiler", "--compiler-options"):
            if i + 1 >= len(args):
                raise Unsupported("%s without its value" % f)
            out += [x for x in re.split(r",", args[i + 1]) if x]
            i += 2
            continue
        if f.startswith("-Xcompiler=") or f.startswith("--compiler-options="):
            out += [x for x in f.split("=", 1)[1].split(",") if x]
        elif re.match(r"^-O[0-3]$", f):
            out.append(f)  # nvcc passes its -O level to the host compiler too
        elif _HOST_TOO.match(f):
            out.append(f)
            if f in ("-D", "-U", "-I", "-isystem") and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
        elif _DEVICE_ONLY.match(f):
            if f in ("-gencode", "-arch", "-code", "-maxrregcount", "-Xptxas", "--ptxas-options", "-Xnvlink",
                     "--generate-code", "--gpu-architecture", "--gpu-code", "--maxrregcount", "--threads", "-t") \
                    and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1
        else:
            raise Unsupported("nvcc flag %r has no host meaning known to the fast builder" % f)
        i += 1
    return out


# ------------------------------------------------------------------------------------------------
# The build

HOST_PRELUDE = """// dice fast build: the host part of the candidate's .cu (its kernels live in device.o)
#include "{header}"
#include <cuda.h>
#include <cuda_runtime.h>
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim = 1, size_t sharedMem = 0,
                                                 struct CUstream_st* stream = 0);
"""

# The launch count (the judge's own-kernel evidence without CUPTI): per kernel of the source, how many
# of its launches the runtime accepted; read by the candidate process (runner.py) around each call.
LAUNCH_COUNTER = """extern "C" __attribute__((visibility("default"))) unsigned long long dice_own_launches[{n}] = {{0}};
extern "C" __attribute__((visibility("default"))) const char dice_own_kernel_names[] = "{names}";
static inline void __dice_launched(int i) {{
  if (cudaPeekAtLastError() == cudaSuccess) ++dice_own_launches[i];
}}
"""


# The whole-frontend includes a candidate's C++ repeats after load_inline's own torch/extension.h.
FRONTEND_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(extension|torch|all)\.h[>"][ \t]*(//.*)?$', re.M)


# An error of g++ in main.cpp's own text: main.cpp:line:column: [fatal ]error: ...
_MAIN_ERROR = re.compile(r"^main\.cpp:(\d+):\d+: (?:fatal )?error: ")


def _light_error_stands(norm, log, pch_dir, recipe):
    """Whether a compile error of the bound main.cpp on the light header (torch/types.h) is the
    candidate's own, so that load_inline's main.cpp on torch/extension.h would fail too and need not
    be built (a second, ~4x slower compile). Yes only when every error lies in the candidate's lines
    (not in the binding table, a header or the driver) and the candidate names nothing that only
    torch/extension.h declares or defines where the candidate can reach it (ext.py's FULL_ONLY_NAMES:
    a name counts when the candidate writes it and either it is global or the candidate also writes
    a namespace it is reached through). What the full header adds is then out of the candidate's
    reach, but for an overload or specialization that only torch/extension.h declares of a name that
    both headers declare: a candidate that needed one gets compile_error (never a pass)."""
    names_file = recipe.get("full_only_names")
    if not names_file or not norm["cpp_sources"]:
        return False
    first, last = 2, 1 + "\n".join(norm["cpp_sources"]).count("\n") + 1  # line 1 is the header
    # every line that says error (the driver's, a header's, the table's, a quoted source line's) must be one
    errors = [line for line in log.splitlines() if "error:" in line and not line.startswith("$ ")]
    where = [_MAIN_ERROR.match(line) for line in errors]
    if not errors or any(m is None or not first <= int(m.group(1)) <= last for m in where):
        return False
    # the words the candidate looks up (a member after . or -> is found in its class, which is whole
    # in either header)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*",
                           re.sub(r"(\.|->)\s*[A-Za-z_][A-Za-z0-9_]*", " ", "\n".join(norm["cpp_sources"]))))
    try:
        with open(os.path.join(pch_dir, names_file)) as fh:
            for line in fh:  # name<TAB>the names through which code reaches it ("" = the global scope)
                name, _, via = line.rstrip("\n").partition("\t")
                if name in words and any(v == "" or v in words for v in via.split(",")):
                    return False
    except OSError:
        return False
    return True


# An error of nvcc in the device part's own text: device.cu(line): error: identifier "X" is undefined
_DEVICE_UNDEFINED = re.compile(r'^device\.cu\(\d+\): error: identifier "([A-Za-z_][A-Za-z0-9_]*)" is undefined$', re.M)
_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef)\b", re.M)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _reachable_words(recipe, pch_dir):
    """The words file make-pch wrote beside the PCH (ext.py write_cuda_reachable_words), or None."""
    try:
        with open(os.path.join(pch_dir, recipe["cuda_reachable_words"])) as fh:
            return json.load(fh)
    except (KeyError, OSError, ValueError):
        return None


def _torch_includes_covered(src, reach):
    """Whether every torch include of the .cu is a header the words file covers (its "headers")."""
    covered = set(reach.get("headers", []))
    return all(m.group(1) in covered for m in _INCLUDE.finditer(src) if TORCH_INCLUDE.match(m.group(0)))


def _device_error_stands(norm, log, split, pch_dir, recipe):
    """Whether the device part's compile error is one the plain build of the whole .cu makes too, so
    that it need not be built (nvcc parsing the torch headers: seconds a candidate). The device part
    is the .cu's text less its torch includes and host items, in the same order; the plain build
    reads the same text after the torch headers. Yes only when nvcc says `identifier "X" is undefined`
    in the device part and X is no word that could name something there: no word of the host items,
    and none of ext.py's CUDA_REACHABLE words (what the torch and CUDA headers of the plain build
    declare at namespace scope or as macros, or call anywhere, as nvcc's host pass reads them; that
    pass parses every function body). And the rest must be the same program: the .cu includes no
    torch header outside those CUDA_REACHABLE read, tests no macro (#if/#ifdef: a torch macro could
    flip it), pastes no tokens (##: a host item could declare X so) and uses no macro the torch
    headers define (it could swallow the undefined word)."""
    undefined = _DEVICE_UNDEFINED.findall(log)
    if not recipe.get("cuda_reachable_words") or not undefined:
        return False
    src = "\n".join(norm["cuda_sources"])
    if _CONDITIONAL.search(src) or "##" in src:  # ## could make X in a host item the device part lacks
        return False
    reach = _reachable_words(recipe, pch_dir)
    if reach is None or not _torch_includes_covered(src, reach):
        return False
    dev_src, host_src, _ = split
    # every word of the text, preprocessor lines, strings and comments included (more than enough)
    if set(_WORD.findall(dev_src)) & set(reach.get("macros", [])):
        return False
    host_words = set(_WORD.findall(host_src))
    known = set(reach.get("words", []))
    return any(x not in known and x not in host_words for x in undefined)


_DEFINE_LINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)(\([^)]*\))?(.*)$")
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


_RANK = {"keeps": 0, "args": 1, "body": 2}


def macro_class(define_line):
    """How the macro a `#define` line defines can change the counts of ( ) [ ] { } of a text that
    uses it, from its own line: "body" when its replacement list does not balance each kind by count,
    holds a digraph or trigraph, or pastes tokens (`##`, but for GNU's `, ## __VA_ARGS__`); "args"
    when a function-like one stringifies, or uses a parameter other than exactly once (only an
    invocation whose arguments each balance [ ] and { } keeps the counts then; its parentheses balance
    by the preprocessor's own rule); else "keeps" (each argument's brackets appear once in the
    expansion, as in the text). None when the line is no #define."""
    m = _DEFINE_LINE.match(define_line.replace("\\\n", " "))
    if not m:
        return None
    body = re.sub(r"//.*|/\*.*?\*/", " ", _LITERAL.sub(" ", m.group(3)), flags=re.S)
    if any(body.count(o) != body.count(c) for o, c in ("()", "[]", "{}")) or \
            any(g in body for g in ("<%", "%>", "<:", ":>", "%:", "??")) or \
            "##" in re.sub(r",\s*##\s*__VA_ARGS__", " ", body):
        return "body"
    if m.group(2) is None:
        return "keeps"
    params = [p.strip() for p in m.group(2)[1:-1].split(",") if p.strip()]
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", body)
    if "__VA_OPT__" in words:
        return "body"
    if "#" in re.sub(r",\s*##\s*__VA_ARGS__", " ", body):
        return "args"
    for p in params:
        if words.count("__VA_ARGS__" if p == "..." else p[:-3] if p.endswith("...") else p) != 1:
            return "args"
    return "keeps"


def invocations_balance(toks, names, bare_ok=True):
    """Whether every invocation in toks of a macro in names has arguments that each balance [ ] and
    { } by count (the preprocessor splits arguments at top-level commas, matching parentheses only).
    A name not followed by "(" is no invocation of a function-like macro: fine where bare_ok."""
    for i, t in enumerate(toks):
        if t.kind != "ident" or t.text not in names:
            continue
        if i + 1 >= len(toks) or toks[i + 1].text != "(":
            if bare_ok:
                continue
            return False
        depth, count, j = 0, {}, i + 1
        while j < len(toks):
            x = toks[j].text if toks[j].kind == "punct" else None
            if x == "(":
                depth += 1
            elif x == ")":
                depth -= 1
            if depth == 0 or (depth == 1 and x == ","):
                if any(count.get(o, 0) != count.get(c, 0) for o, c in ("[]", "{}")):
                    return False
                count = {}
                if depth == 0:
                    break
            elif x in ("[", "]", "{", "}"):
                count[x] = count.get(x, 0) + 1
            j += 1
        else:
            return False
    return True


def macro_classes(text, known=None):
    """{name: "body" | "args"} for the macros `#define`d in text (a `-dD` preprocessing, or a
    source) that could change a text's bracket counts (macro_class), with what their replacement
    lists name, to a fixed point: naming a "body" macro makes one "body"; naming an "args" macro
    makes one "body" unless every use is an invocation whose arguments balance, and then a
    function-like one "args" (its own arguments flow into it). known: classes already decided (the
    words file's, for the headers); a name takes the worst of its definitions. Returned with known."""
    cls, defs = dict(known or {}), []
    for line in text.splitlines():
        c = macro_class(line) if line.lstrip().startswith("#") else None
        if c is None:
            continue
        m = _DEFINE_LINE.match(line)
        try:
            toks = tokenize(m.group(3))
        except Unsupported:
            c, toks = "body", []
        defs.append((m.group(1), m.group(2) is not None, toks))
        if _RANK[c] > _RANK[cls.get(m.group(1), "keeps")]:
            cls[m.group(1)] = c
    grew = True
    while grew:
        grew = False
        body = {n for n, c in cls.items() if c == "body"}
        args = {n for n, c in cls.items() if c == "args"}
        for name, function_like, toks in defs:
            if cls.get(name) == "body":
                continue
            words = {t.text for t in toks if t.kind == "ident"}
            if words & body or not invocations_balance(toks, args & words, bare_ok=False):
                new = "body"
            elif words & args and function_like:
                new = "args"
            else:
                continue
            if _RANK[new] > _RANK[cls.get(name, "keeps")]:
                cls[name] = new
                grew = True
    return {n: c for n, c in cls.items() if c != "keeps"}


_DIGRAPHS = {("<", "%"), ("%", ">"), ("<", ":"), (":", ">"), ("%", ":")}
_BRACKETS = (("(", ")"), ("[", "]"), ("{", "}"))


def _unbalanced_stands(src, user_flags, include_paths, pch_dir, recipe):
    """Whether a .cu (load_inline's cuda.cu text) whose brackets the fast builder could not match is
    one the plain build fails on too, so that it need not be built: a C++ program balances ( ) [ ] { }
    by count, the headers before the candidate's text do, and here the candidate's own tokens do not
    (comments, strings and preprocessor lines left out) and nothing can change that count: no macro
    the text uses could (macro_classes: the words file's lists, for everything the plain build's
    headers define; an argument-sensitive one only where an invocation's arguments do not balance),
    the .cu defines none that could, every header it includes is one that file read (or a torch
    header it covers), it tests no macro (#if: a branch could hold the missing bracket), pastes no
    tokens, spells no digraph (<% %> <: :> %:) nor trigraph, and no flag or include path of the
    candidate's could define a macro or stand in for a header."""
    if not recipe.get("cuda_reachable_words") or include_paths or "##" in src or "??" in src or _CONDITIONAL.search(src):
        return False
    if any(f.startswith(("-D", "-U", "-i", "--pre-include", "--define", "--undefine", "-imacros", "-I", "--include-path",
                                "--system-include")) for f in user_flags):
        return False
    reach = _reachable_words(recipe, pch_dir)
    if reach is None or any(k not in reach for k in ("count_changing_macros", "arg_sensitive_macros", "included")):
        return False
    try:
        toks = tokenize(src)
    except Unsupported:
        return False
    if any(t.kind == "pp" and not re.match(r"[ \t]*#[ \t]*(define|undef|pragma)\b", t.text) and
           not _INCLUDE.match(t.text) for t in toks):
        return False  # a computed #include, #line, #error, ... (the plain build could read anything)
    if not _torch_includes_covered(src, reach):
        return False
    if any(not TORCH_INCLUDE.match(m.group(0)) and not any(p.endswith("/" + m.group(1)) for p in reach["included"])
           for m in _INCLUDE.finditer(src)):
        return False  # a header the words file did not read
    own = "\n".join(re.sub(r"\\\n|\n", " ", t.text) for t in toks if t.kind == "pp")
    known = dict({n: "args" for n in reach["arg_sensitive_macros"]}, **{n: "body" for n in reach["count_changing_macros"]})
    classes = macro_classes(own, known)
    if set(classes) - set(known):
        return False  # one of the .cu's own, used or not (a header it includes after could use it)
    code = [t for t in toks if t.kind != "pp"]
    if any(t.kind == "ident" and classes.get(t.text) == "body" for t in code):
        return False
    if not invocations_balance(code, {n for n, c in classes.items() if c == "args"}):
        return False
    if any(a.kind == b.kind == "punct" and a.end == b.start and (a.text, b.text) in _DIGRAPHS
           for a, b in zip(code, code[1:])):
        return False
    count = {}
    for t in code:
        if t.kind == "punct":
            count[t.text] = count.get(t.text, 0) + 1
    return any(count.get(o, 0) != count.get(c, 0) for o, c in _BRACKETS)


def _bound_main(norm, header, light=False):
    """main.cpp with a dice_bind table instead of a pybind11 module (dice_bind.h); None when the
    functions cannot be named that way (the pybind11 main.cpp is used then). light: on torch/types.h,
    with the candidate's own includes of the whole frontend left out (they would be parsed from
    text); code that needs more does not compile so, and gets load_inline's main.cpp instead."""
    if norm["functions"] is None or not norm["with_pytorch_error_handling"] or not norm["functions"]:
        return None
    entries = []
    for f, doc in norm["functions"].items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", f) or re.search(r'["\\\n]', doc):
            return None
        entries.append('DICE_BIND(%s, "%s")' % (f, doc))
    sources = [FRONTEND_INCLUDE.sub("// [dice: torch frontend include left out]", c) if light else c
               for c in norm["cpp_sources"]]
    return "\n".join([header] + sources + ['#include "dice_bind.h"', "DICE_BIND_TABLE(" + " ".join(entries) + ")", ""])


def _host_text(host_src, light_header, counted):
    """host.cpp: on light_header (torch/types.h) without the source's own frontend includes, or, with
    light_header "", on the full host header as the source was written. counted: the kernel names
    whose launches are counted, in the order of their numbers."""
    prelude = HOST_PRELUDE.replace("{header}", light_header or "dice_cuda_host.h") + LAUNCH_COUNTER.format(
        n=max(1, len(counted)), names="\\n".join(counted))
    if light_header:
        return prelude + FRONTEND_INCLUDE.sub("// [dice: torch frontend include left out]", host_src)
    return prelude + host_src


# ------------------------------------------------------------------------------------------------
# One translation unit instead of two. load_inline compiles main.cpp (cpp_sources and the bindings)
# and the .cu apart; each g++ run pays the torch headers' fixed cost (reading the precompiled header,
# instantiating what it left pending): about 2 CPU-s. Where main.cpp is nothing but declarations of
# the host part's functions, written in words that mean the same in any translation unit, the fast
# builder compiles it inside host.cpp, after the host part with every macro that part defined
# undefined. What could make the two texts mean more together than apart is refused here, and
# anything that does not compile so is compiled apart again, as load_inline has it:
#   - cpp_sources: only function declarations (`#include <...>` and `#pragma once` besides), whose
#     words are C++'s own type words, torch / at / c10 / std and, after `::`, the types the table
#     binds; parameter names plain (not a CUDA, torch or reserved name, not a -D of the flags)
#   - the host part: no namespace-scope `using namespace`, nothing added to torch's, std's or the
#     table's namespaces, no #pragma but `once` and `unroll` (a `pack` would change the table's
#     layout), every bound function defined at global scope without static / inline / template
#     (apart, main.cpp could not link to such a function)
#   - the flags: main.cpp's extra flags only -O / -g / -w / -W (no -D, -I, -std that could change
#     what it means), the host part's -D names not among the declarations' words, no include paths
# Overloads of a bound function make the table's `&f` ambiguous: that does not compile, and is built
# apart. What merges saves one g++ run; a main.cpp already in the part cache is not compiled at all,
# and then nothing is merged.
_MERGE_WORDS = {"const", "int", "float", "double", "bool", "void", "unsigned", "signed", "long", "short", "char",
                "int64_t", "int32_t", "uint64_t", "uint32_t", "size_t", "torch", "at", "c10", "std"}
_MERGE_MEMBERS = {"Tensor", "optional", "vector", "string", "tuple", "int64_t", "int32_t", "uint64_t", "uint32_t",
                  "size_t"}
_MERGE_NAME = re.compile(r"^(?!cu|CU|Cu|nv|NV|C10|TORCH|AT_|CUB|CUDA|Py|PY)[A-Za-z][A-Za-z0-9_]*$")
_MERGE_PP = re.compile(r"^#[ \t]*(include[ \t]*<[\w./+-]+>|pragma[ \t]+once)[ \t]*(//.*)?$")
_MERGE_CFLAG = re.compile(r"^-(O[0-3s]?|g|w|W[\w=-]*)$")
_MERGE_HFLAG = re.compile(r"^-(O[0-3s]?|g|w|W[\w=-]*|std=\S+|[DU][A-Za-z_]\w*(=\S*)?)$")
_HOST_PP = re.compile(r"^#[ \t]*(include|define|undef|if|ifdef|ifndef|elif|else|endif|pragma[ \t]+(once|unroll))\b")
_RESERVED_SCOPES = {"torch", "at", "c10", "std", "pybind11", "py", "caffe2", "dice_bind"}
_NOT_EXTERNAL = {"static", "inline", "constexpr", "template", "__forceinline__", "__inline__"}


def _type_ok(toks):
    """Whether a declaration's type tokens use only the words that mean the same everywhere."""
    for k, t in enumerate(toks):
        if t.kind == "ident":
            qualified = k > 0 and toks[k - 1].text == "::"
            if t.text not in (_MERGE_MEMBERS if qualified else _MERGE_WORDS):
                return False
        elif t.kind != "punct" or t.text not in ("::", "<", ">", ">>", ",", "&", "&&", "*"):
            return False
    return True


def _split_params(toks):
    """The parameter lists' parameters (token lists), split at commas outside <> and ()."""
    params, cur, depth = [], [], 0
    for t in toks:
        if t.text in ("<", "("):
            depth += 1
        elif t.text in (">", ")"):
            depth -= 1
        elif t.text == ">>":
            depth -= 2
        if t.text == "," and depth == 0:
            params.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur or params:
        params.append(cur)
    return params


def _declarations(cpp_sources, macro_names):
    """(the cpp_sources' text, the names they declare as functions) when they are nothing but
    function declarations in words that mean the same in any translation unit; None otherwise."""
    names = set()
    for src in cpp_sources:
        toks = tokenize(src)
        stmt = []
        for t in toks:
            if t.kind == "pp":
                if stmt or not _MERGE_PP.match(t.text):
                    return None
                continue
            if t.text != ";":
                stmt.append(t)
                continue
            if not stmt:
                continue
            p = next((k for k, x in enumerate(stmt) if x.text == "("), None)
            if p is None or p == 0 or stmt[-1].text != ")" or _match(stmt, p) != len(stmt) - 1:
                return None
            fn = stmt[p - 1]
            if fn.kind != "ident" or not _MERGE_NAME.match(fn.text) or fn.text in _MERGE_WORDS | _MERGE_MEMBERS \
                    or fn.text in macro_names or not _type_ok(stmt[:p - 1]):
                return None
            for param in _split_params(stmt[p + 1:-1]):
                if "=" in [x.text for x in param]:
                    eq = [x.text for x in param].index("=")
                    default = param[eq + 1:]
                    if not default or not all(x.kind == "number" or x.text in ("-", "+", "true", "false")
                                              for x in default):
                        return None
                    param = param[:eq]
                if len(param) >= 2 and param[-1].kind == "ident" and param[-1].text not in _MERGE_WORDS \
                        and (param[-2].kind == "ident" or param[-2].text in ("&", "&&", "*", ">", ">>")):
                    if not _MERGE_NAME.match(param[-1].text) or param[-1].text in macro_names:
                        return None
                    param = param[:-1]
                if not param or not _type_ok(param):
                    return None
            names.add(fn.text)
            stmt = []
        if stmt:
            return None
    return "\n".join(cpp_sources), names


def _host_mergeable(host_src, functions):
    """Whether the host part leaves the declarations and the table meaning what they mean apart, and
    defines each bound function so that main.cpp apart would link to it. The macros it defines."""
    toks = tokenize(host_src)
    defined = []
    for t in toks:
        if t.kind == "pp":
            if not _HOST_PP.match(t.text):
                return None
            m = re.match(r"^#[ \t]*define[ \t]+([A-Za-z_]\w*)", t.text)
            if m:
                defined.append(m.group(1))
    for it in split_items(host_src, toks):
        if set(it.scope) & _RESERVED_SCOPES:
            return None
        words = [t.text for t in it.toks if t.kind == "ident"]
        if it.kind == "open" and set(words) & _RESERVED_SCOPES:
            return None
        if it.kind == "decl" and words[:2] == ["using", "namespace"]:
            return None
        if it.kind == "decl" and words[:1] == ["using"] and "=" not in [t.text for t in it.toks]:
            return None  # a using-declaration at namespace scope
        if it.kind in ("decl", "func"):
            name = _function_name(it)
            if name in functions and (it.scope not in ((), ("extern",)) or _head_words(it) & _NOT_EXTERNAL):
                return None
    return defined


def _merged_unit(norm, host_text, host_src, hflags, user_cflags, includes):
    """host.cpp with main.cpp's declarations and the dice_bind table after it, or None (see above)."""
    if includes or not all(_MERGE_CFLAG.match(f) for f in user_cflags) \
            or not all(_MERGE_HFLAG.match(f) for f in hflags):
        return None
    functions = list(norm["functions"] or ())
    macro_names = {re.match(r"^-[DU]([A-Za-z_]\w*)", f).group(1) for f in hflags if f[:2] in ("-D", "-U")}
    decls = _declarations(norm["cpp_sources"], macro_names)
    if decls is None or not functions or not set(functions) <= decls[1]:
        return None
    defined = _host_mergeable(host_src, set(functions))
    if defined is None:
        return None
    table = _bound_main(norm, "", light=True)
    if table is None:
        return None
    undefs = "".join("#undef %s\n" % m for m in sorted(set(defined)))
    return "\n".join([host_text, "// [dice: main.cpp's declarations and bindings, the host part's macros undefined]",
                      undefs + "#line 1 \"main.cpp\"", table])


def _fill(template, **kw):
    """A recipe command with its {placeholders} filled (values are already shell words)."""
    return re.sub(r"\{(\w+)\}", lambda m: kw[m.group(1)], template)


def _q(flags):
    return " ".join(flags)


def build(norm, key, settings, out_dir, forbidden_flag):
    """Builds the extension in out_dir; returns the answer dict."""
    t0 = time.time()
    pch = settings.get("pch") or {}
    cuda = bool(norm["cuda_sources"]) or bool(norm["with_cuda"])
    pch_dir = pch.get("cuda" if cuda else "cpp", "")
    recipe_path = os.path.join(pch_dir, "recipe.json") if pch_dir else ""
    if not recipe_path or not os.path.exists(recipe_path):
        return {"status": "fallback", "log": "no build recipe for this toolchain yet"}
    bad = forbidden_flag(norm)
    if bad is not None:
        return {"status": "compile_error", "log": "compiler option %r is not allowed (it runs or loads another program)" % bad}
    with open(recipe_path) as fh:
        recipe = json.load(fh)
    if norm["functions"] is None:
        return {"status": "fallback", "log": "no functions list (a module without bindings)"}
    if cuda and not recipe.get("cuda_compile"):
        return {"status": "fallback", "log": "the recipe has no CUDA compile command"}
    name = "dice_%s_f" % key[:20]
    user_cflags = norm["extra_cflags"] + list(settings.get("extra_cflags", []))
    user_cuda = norm["extra_cuda_cflags"] + list(settings.get("extra_cuda_cflags", []))
    includes = ["-I" + p for p in norm["extra_include_paths"]]
    d = out_dir
    # the table's main.cpp on torch/types.h (its own PCH); load_inline's main.cpp decides compile errors
    bind_header = recipe.get("bind_header", "")
    bound = (_bound_main(norm, '#include "%s"' % (bind_header or "dice_full.h"), light=bool(bind_header))
             if recipe.get("binding") else None)
    main_text = bound or pybind_main(norm, '#include "dice_full.h"')
    with open(os.path.join(d, "main.cpp"), "w") as fh:
        fh.write(main_text)
    steps = {}
    parts = Parts(settings, d, name, norm)
    jobs = [("main", _fill(recipe["cpp_compile"], name=name, src="main.cpp", obj="main.o",
                           inc=_q(includes + ["-I" + pch_dir]), extra=_q(user_cflags)), "main.o", main_text)]
    objs = ["main.o"]
    split = None
    if norm["cuda_sources"]:
        try:
            cu_text = "\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
                                + norm["cuda_sources"])
            split = split_cuda(cu_text)
            hflags = host_flags(user_cuda)
        except Unsupported as e:
            split = None
            reason = str(e)
        if split is None:
            if reason == "unbalanced brackets" and _unbalanced_stands(cu_text, user_cuda, includes, pch_dir, recipe):
                return {"status": "compile_error", "steps": steps,
                        "log": "fast build: the .cu's brackets ( ) [ ] { } do not balance by count, and no macro, "
                               "header or flag it uses can balance them: nvcc cannot compile it (not built)"}
            return {"status": "fallback", "log": "fast build: " + reason}
        dev_src, host_src, info = split
        host_pch = recipe.get("host_pch", "")  # without it the host part parses those headers (slower, same program)
        host_light = recipe.get("host_light", "")
        if not host_pch or not os.path.exists(os.path.join(host_pch, "dice_cuda_host.h")):
            host_pch, host_light = os.path.join(d, "hosthdr"), ""
            os.makedirs(host_pch)
            with open(os.path.join(host_pch, "dice_cuda_host.h"), "w") as fh:
                fh.write("#include <torch/extension.h>\n#include <cuda_runtime.h>\n")
        with open(os.path.join(d, "device.cu"), "w") as fh:
            fh.write(dev_src)
        # first on torch/types.h (host_light), the .cu's own frontend includes left out; again on the full
        # header when that does not compile
        host_text = _host_text(host_src, host_light, info["counted"])
        with open(os.path.join(d, "host.cpp"), "w") as fh:
            fh.write(host_text)
        jobs.append(("host", _fill(recipe["host_compile"], name=name, src="host.cpp", obj="host.o",
                                   inc=_q(includes + ["-I" + host_pch]), extra=_q(hflags)), "host.o", host_text))
        jobs.append(("device", _fill(recipe["cuda_compile"], name=name, src="device.cu", obj="device.o",
                                     inc=_q(includes), extra=_q(user_cuda)), "device.o", dev_src))
        objs += ["host.o", "device.o"]
        if bound and host_light and not parts.has(jobs[0][1], main_text):
            try:
                unit = _merged_unit(norm, host_text, host_src, hflags, user_cflags, includes)
            except Unsupported:
                unit = None
            if unit is not None:
                jobs.append(("unit", _fill(recipe["host_compile"], name=name, src="unit.cpp", obj="host.o",
                                           inc=_q(["-I" + host_pch, "-I" + pch_dir]), extra=_q(hflags)), "host.o", unit))
                with open(os.path.join(d, "unit.cpp"), "w") as fh:
                    fh.write(unit)
    logs = {}
    if jobs[-1][0] == "unit":
        ok = parts.run(jobs[2:], steps, logs)  # the unit and the device part
        if ok["unit"]:
            ok["main"] = ok["host"] = True
            objs.remove("main.o")
        else:  # apart, as load_inline compiles them
            ok.update(parts.run(jobs[:2], steps, logs))
    else:
        ok = parts.run(jobs, steps, logs)
    if not ok.get("main", False) and bound and bind_header and _light_error_stands(norm, logs.get("main", ""),
                                                                                   pch_dir, recipe):
        return {"status": "compile_error", "log": logs.get("main", "")[-6000:], "steps": steps}
    if not ok.get("main", False) and bound:
        # the table's main.cpp is not load_inline's: its text decides whether this is the candidate's error
        main_text = pybind_main(norm, '#include "dice_full.h"')
        with open(os.path.join(d, "main.cpp"), "w") as fh:
            fh.write(main_text)
        bound = None
        ok.update(parts.run([("main_pybind", jobs[0][1], "main.o", main_text)], steps, logs))
        ok["main"], logs["main"] = ok["main_pybind"], logs["main_pybind"]
    if not ok.get("main", False):
        return {"status": "compile_error", "log": logs.get("main", "")[-6000:], "steps": steps}
    if split is not None and not ok.get("host") and host_light:
        host_text = _host_text(split[1], "", split[2]["counted"])
        with open(os.path.join(d, "host.cpp"), "w") as fh:
            fh.write(host_text)
        ok.update(parts.run([("host_full", jobs[1][1], "host.o", host_text)], steps, logs))
        ok["host"], logs["host"] = ok["host_full"], logs["host_full"]
    if split is not None:
        if not ok.get("device") and _device_error_stands(norm, logs.get("device", ""), split, pch_dir, recipe):
            return {"status": "compile_error", "log": logs["device"][-6000:], "steps": steps}
        if not (ok.get("host") and ok.get("device")):
            failed = "host" if not ok.get("host") else "device"
            return {"status": "fallback", "log": "fast build: the %s part did not compile:\n%s" % (failed, logs[failed][-3000:]),
                    "steps": steps}
        err = _resolve_stubs(recipe, d, split[0], split[2], name, includes, user_cuda, steps, logs, parts)
        if err:
            return {"status": "fallback", "log": "fast build: " + err, "steps": steps}
    link = _fill(recipe["link"], name=name, objs=_q(objs), so=name + ".so",
                 extra=_q(norm["extra_ldflags"]))
    if not _run_parallel([("link", link)], d, steps, logs).get("link"):
        if split is not None:
            return {"status": "fallback", "log": "fast build: link failed:\n" + logs["link"][-3000:], "steps": steps}
        return {"status": "compile_error", "log": logs["link"][-6000:], "steps": steps}
    # every launch of the source's own kernels is counted: the judge needs no CUPTI for its evidence
    counter = split is not None and not split[2]["uncounted"] and not _other_launches("\n".join(norm["cpp_sources"]))
    return {"status": "ok", "name": name, "so": os.path.join(d, name + ".so"), "header": "fast",
            "binding": bool(bound), "build_s": time.time() - t0, "steps": steps, "launch_counter": counter,
            "parts": parts.made, "cached_parts": parts.hits}


# Object files by content (`<cache_root>/parts/<key>.o`): samples of one task often share a part (the
# same cpp_sources declarations, the same kernels with another launch configuration), which then
# compiles once. The key is the compile command (the module's name left out) and the part's text;
# a part that names TORCH_EXTENSION_NAME, or a build with include paths of its own (files the key
# does not read), is not cached. The builder only reads the cache: the judge publishes the parts a
# successful build compiled ("parts" in the answer: file in the build directory -> key).
PART_TAG = "dice-part-1"


def _part_key(cmd, name, text, norm):
    if "TORCH_EXTENSION_NAME" in text or norm["extra_include_paths"]:
        return None
    h = hashlib.sha256()
    for piece in (PART_TAG, cmd.replace(name, "{name}"), text):
        h.update(piece.encode("utf-8", "surrogatepass") + b"\x1f")
    return h.hexdigest()


class Parts:
    """The part cache of one build: compiles what it lacks, copies in what it has."""

    def __init__(self, settings, d, name, norm):
        root = settings.get("cache_root") or ""
        self.dir = os.path.join(root, "parts") if root else ""
        self.d, self.name, self.norm = d, name, norm
        self.made, self.hits = {}, []

    def has(self, cmd, text):
        """Whether the cache holds this part (compiled by cmd from text)."""
        key = _part_key(cmd, self.name, text, self.norm) if self.dir else None
        return bool(key) and os.path.isfile(os.path.join(self.dir, key + ".o"))

    def run(self, jobs, steps, logs):
        """jobs: (label, command, object file, source text); as _run_parallel."""
        todo, ok, keys = [], {}, {}
        for label, cmd, obj, text in jobs:
            key = _part_key(cmd, self.name, text, self.norm) if self.dir else None
            cached = os.path.join(self.dir, key + ".o") if key else ""
            if cached and os.path.isfile(cached):
                try:
                    shutil.copyfile(cached, os.path.join(self.d, obj))
                    ok[label], steps[label], logs[label] = True, 0.0, "(cached part %s)" % key[:16]
                    self.hits.append(label)
                    continue
                except OSError:
                    pass
            todo.append((label, cmd))
            keys[label] = (key, obj)
        ok.update(_run_parallel(todo, self.d, steps, logs))
        for label, (key, obj) in keys.items():
            if key and ok.get(label):  # kept as compiled: objcopy may change the object later
                shutil.copyfile(os.path.join(self.d, obj), os.path.join(self.d, label + ".part.o"))
                self.made[label + ".part.o"] = key
        return ok


def _run_parallel(jobs, cwd, steps, logs):
    procs = []
    for label, cmd in jobs:
        t = time.time()
        p = subprocess.Popen(["/bin/sh", "-c", cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append((label, cmd, p, t))
    ok = {}
    for label, cmd, p, t in procs:
        out = p.communicate()[0].decode(errors="replace")
        steps[label] = round(time.time() - t, 3)
        ok[label] = p.returncode == 0
        logs[label] = "$ %s\n%s" % (cmd, out)
    return ok


def _symbols(path, *opts):
    r = subprocess.run(["nm", *opts, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise Unsupported("nm %s: %s" % (path, r.stderr[-300:]))
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[-1]] = parts[-2]
    return out


def _demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else []


def _resolve_stubs(recipe, d, dev_src, info, name, includes, user_cuda, steps, logs, parts):
    """Makes every kernel stub host.o calls a global symbol of device.o; '' or why not."""
    try:
        host_undef = {s for s, k in _symbols(os.path.join(d, "host.o")).items() if k == "U"}
        dev = _symbols(os.path.join(d, "device.o"))
        missing = sorted(s for s in host_undef if s.startswith("_Z") and s not in dev)
        kernels = set(info["kernels"])
        wanted = []
        for sym, dem in zip(missing, _demangle(missing)):
            base = re.match(r"^(?:[\w:]+\s+)?((?:\w+::)*(\w+))<", dem)
            if base and base.group(2) in set(info["templates"]):
                wanted.append(dem)
        if wanted:  # template kernels the host code instantiates: instantiate them in device.cu
            extra = "\n// [dice: template kernels the host part launches]\n" + "\n".join(
                "template __global__ %s;" % w for w in wanted)
            with open(os.path.join(d, "device.cu"), "w") as fh:
                fh.write(dev_src + extra)
            if not parts.run([("device2", _fill(recipe["cuda_compile"], name=name, src="device.cu", obj="device.o",
                                                inc=_q(includes), extra=_q(user_cuda)), "device.o", dev_src + extra)],
                             steps, logs)["device2"]:
                return "the explicit instantiations did not compile:\n" + logs["device2"][-2000:]
            dev = _symbols(os.path.join(d, "device.o"))
        # a static kernel's stub is mangled with L (internal linkage): give it the host's name
        renames = {"_ZL" + s[2:]: s for s in host_undef
                   if s.startswith("_Z") and s not in dev and dev.get("_ZL" + s[2:]) in ("t", "T")}
        for old_name, new_name in renames.items():
            dev[new_name] = dev.pop(old_name)
        local = [s for s in host_undef if dev.get(s) in ("t", "W", "w")]
        undefined = [s for s in host_undef if s.startswith("_Z") and s not in dev]
        for sym, dem in zip(undefined, _demangle(undefined)):
            if any(re.search(r"\b%s\b" % re.escape(k), dem) for k in kernels):
                return "host code calls %s, which device.o does not define" % dem
        if local:
            args = ["--redefine-sym=%s=%s" % kv for kv in renames.items()]
            args += ["--globalize-symbol=" + s for s in local]
            r = subprocess.run(["objcopy"] + args + ["device.o"], cwd=d, capture_output=True, text=True)
            if r.returncode != 0:
                return "objcopy: " + r.stderr[-500:]
        return ""
    except Unsupported as e:
        return str(e)


def main():
    out = os.fdopen(3, "w", buffering=1)
    os.nice(10)  # builds are batch work: the executors' candidate and reference processes go first
    try:
        job = json.loads(sys.stdin.readline())
        answer = build(normalize(job["request"]), job["key"], job["settings"],
                       tempfile.mkdtemp(prefix="fast.", dir=os.getcwd()), forbidden_flag)
    except Exception as e:  # noqa: BLE001 -- anything unexpected: build it the plain way
        answer = {"status": "fallback", "log": "fast build: %s: %s" % (type(e).__name__, str(e)[-2000:])}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
    os._exit(0)
