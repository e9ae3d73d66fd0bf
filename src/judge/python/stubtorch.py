"""A stand-in for `torch` in the compile step, so that most compile steps never import torch.

The compile step (compile.py) runs a candidate's module only to capture its load_inline calls.
`import torch` costs about 3 s of CPU there (more on a busy node), once per candidate. A candidate
module asks little of torch at its top level: the imports, `class ModelNew(nn.Module)`, type
annotations, the load_inline call. `install()` puts a stand-in into sys.modules that serves exactly
that, and nothing else:

- the modules torch, torch.nn, torch.nn.functional, torch.autograd, torch.utils and
  torch.utils.cpp_extension; importing any other torch module escapes;
- torch.Tensor, torch.nn.<name> and torch.nn.functional.<name> are opaque values (`Opaque`); any
  other attribute of torch escapes (torch.cuda.is_available(), torch.float32, torch.__version__...);
- torch.nn.Module and torch.autograd.Function are classes to derive from; making an instance, or
  asking one of them (or a class derived from them) for an attribute that `object` lacks, escapes;
- an opaque value may be looked up, called, indexed, combined and derived from (giving opaque values
  again), but turning one into anything Python can branch on or pass along (bool, str, int, float,
  len, iter, hash, isinstance, a load_inline argument), asking it for a dunder (`__name__`), or
  setting or deleting anything on it escapes. A name of torch's (torch.Tensor, nn.Linear, F.relu and
  their attributes: classes and functions) compares and hashes by identity, as those do, and lacks
  the attributes typing looks for, as those do (so `Optional[torch.Tensor]` in an annotation works).

"Escapes" means `Escape` is raised (a BaseException, so `except Exception` does not swallow it) and
`escaped` records why, even when the candidate catches it. compile.py then runs the module again
with the real torch. A module that ran through under the stand-in computed its load_inline arguments
without any value from torch and took no branch on one, so they are the arguments it computes with
the real torch: the same build requests, the same digests the executor asks for.

What the stand-in cannot see: the module's load_inline calls are captured but their extensions are
not imported here (an extension that does not load is found by the executor, load_error as before).
"""
import json
import os
import sys
import types

from extflags import ask_build, digest_of, load_inline_call, normalize

escaped = []   # why the module could not run under the stand-in (empty: it did)
calls = []     # one record per load_inline call, as ext.py makes them
failures = []  # build errors, kept even when the candidate catches the exception


class Escape(BaseException):
    """The candidate's module needs the real torch."""


def _escape(why):
    escaped.append(why)
    raise Escape(why)


def _typing_probe(attr):
    """Attributes typing looks for on what it is handed (Optional[torch.Tensor]); torch's classes and
    functions have none of them."""
    return attr.startswith("__typing_") or attr in ("__origin__", "__args__", "__parameters__", "__unpacked__")


class Opaque:
    """A value of torch's that the module may pass around but never look into."""

    __slots__ = ("_name", "_children", "_named")

    def __init__(self, name, named=False):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_children", {})
        # a name of torch's (torch.Tensor, nn.Linear, F.relu, ...): a class or function, which compares
        # and hashes by identity; values made from one (calls, items, operators) may not
        object.__setattr__(self, "_named", named)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            if _typing_probe(attr):
                raise AttributeError(attr)
            # torch's object has it or not, and its value: only the real one can say
            _escape("asks %s for %s" % (object.__getattribute__(self, "_name"), attr))
        children = object.__getattribute__(self, "_children")
        if attr not in children:  # the same object each time: `is` answers as it would with torch
            children[attr] = Opaque("%s.%s" % (object.__getattribute__(self, "_name"), attr),
                                    object.__getattribute__(self, "_named"))
        return children[attr]

    def __setattr__(self, attr, value):
        _escape("sets %s.%s" % (self._name, attr))

    def __delattr__(self, attr):
        _escape("deletes %s.%s" % (self._name, attr))

    def __setitem__(self, key, value):
        _escape("sets an item of %s" % self._name)

    def __delitem__(self, key):
        _escape("deletes an item of %s" % self._name)

    def __call__(self, *args, **kwargs):
        return Opaque(self._name + "()")

    def __getitem__(self, key):
        return Opaque(self._name + "[]")

    def __mro_entries__(self, bases):  # `class C(nn.Linear)`: its methods run only on instances
        return (_Derived,)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def _convert(self, *args):
        _escape("uses the value of %s" % self._name)

    __bool__ = __int__ = __float__ = __index__ = __complex__ = __str__ = __repr__ = __format__ = _convert
    __bytes__ = __len__ = __iter__ = __reversed__ = __contains__ = _convert
    __instancecheck__ = __subclasscheck__ = __fspath__ = __buffer__ = _convert

    def __hash__(self):  # by identity, as torch's classes and functions hash (typing's Optional[...] asks)
        if not self._named:
            _escape("hashes %s" % self._name)
        return id(self)

    def __eq__(self, other):
        if not self._named:
            return Opaque(self._name + "(==)")
        return self is other

    def __ne__(self, other):
        if not self._named:
            return Opaque(self._name + "(!=)")
        return self is not other

    def _combine(self, *args):
        return Opaque(self._name + "(op)")

    __lt__ = __le__ = __gt__ = __ge__ = _combine
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _combine
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _combine
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rshift__ = _combine
    __neg__ = __pos__ = __abs__ = __invert__ = _combine


class _StandInClass(type):
    """nn.Module and autograd.Function have many attributes; these classes only what `object` has."""

    def __getattr__(cls, attr):
        if _typing_probe(attr):
            raise AttributeError(attr)
        _escape("asks %s for %s" % (cls.__name__, attr))


class _Derived(metaclass=_StandInClass):
    """What a class derived from nn.Module, autograd.Function or an opaque value derives from."""

    def __new__(cls, *args, **kwargs):
        _escape("makes an instance of %s" % cls.__name__)

    def __init_subclass__(cls, **kwargs):
        pass


class _Module(types.ModuleType):
    """A stand-in module: the names it serves, an opaque value for any name (opaque_any), or an escape."""

    def __init__(self, name, names, opaque_any=False):
        super().__init__(name)
        self.__dict__.update(names)
        self.__dict__["_opaque_any"] = opaque_any
        self.__dict__["__path__"] = []  # a package: `import torch.nn.functional` looks up submodules

    def __getattr__(self, attr):
        if self.__dict__.get("_opaque_any") and not attr.startswith("__"):
            value = Opaque("%s.%s" % (self.__name__, attr), named=True)
            self.__dict__[attr] = value
            return value
        _escape("uses %s.%s" % (self.__name__, attr))


class _Finder:
    """Any other torch module escapes (instead of an ImportError the module could take a branch on)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            _escape("imports %s" % name)
        return None

    def find_module(self, name, path=None):  # older import systems
        self.find_spec(name)
        return None


_finder = _Finder()


def install(request_build, cache_root):
    """Puts the stand-in into sys.modules. request_build(digest, norm) -> the judge's reply (compile.py)."""

    def load_inline(*args, **kwargs):
        _check_plain((args, kwargs), "load_inline's arguments")
        norm = normalize(load_inline_call(*args, **kwargs))
        digest = digest_of(norm)
        key, cache_hit, seconds = ask_build(request_build, digest, norm, failures)
        rec = {"digest": digest, "cache_hit": cache_hit, "seconds": seconds, "key": key}
        final = os.path.join(cache_root, key)
        with open(os.path.join(final, "meta.json")) as fh:
            meta = json.load(fh)
        rec.update(name=meta["name"], header=meta["header"], so=os.path.join(final, meta["so"]))
        calls.append(rec)
        return Opaque("extension %s" % meta["name"])

    functional = _Module("torch.nn.functional", {}, opaque_any=True)
    nn = _Module("torch.nn", {"Module": type("Module", (_Derived,), {}), "functional": functional}, opaque_any=True)
    autograd = _Module("torch.autograd", {"Function": type("Function", (_Derived,), {})})
    cpp_extension = _Module("torch.utils.cpp_extension", {"load_inline": load_inline})
    utils = _Module("torch.utils", {"cpp_extension": cpp_extension})
    torch = _Module("torch", {"nn": nn, "autograd": autograd, "utils": utils, "Tensor": Opaque("torch.Tensor", True)})
    for m in (torch, nn, functional, autograd, utils, cpp_extension):
        sys.modules[m.__name__] = m
    sys.meta_path.insert(0, _finder)


def uninstall():
    """Takes the stand-in (and every torch module the candidate's run left) out, for the real torch."""
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        del sys.modules[name]
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    calls.clear()
    failures.clear()


def _check_plain(x, what, depth=0):
    """Escapes when x holds an opaque value (or is nested too deeply to tell)."""
    if depth > 8:
        _escape("nests %s too deeply" % what)
    if isinstance(x, Opaque):  # isinstance against our own class: Opaque's __instancecheck__ is not asked
        _escape("passes a torch value in " + what)
    if isinstance(x, (list, tuple, set)):
        for v in x:
            _check_plain(v, what, depth + 1)
    elif isinstance(x, dict):
        for k, v in x.items():
            _check_plain(k, what, depth + 1)
            _check_plain(v, what, depth + 1)
