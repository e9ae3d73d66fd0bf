"""Compiles the bytecode of what the judge's processes import into the judge's cache, for a Python
whose torch has none beside its sources (a read-only or `--no-compile` install: every candidate
process would compile ~1,000 of torch's modules from source at `import torch`, seconds of CPU each).

    python bytecode.py PREFIX      (run by the judge as itself, before any sandboxed process starts)

The judge then starts every Python it runs with PYTHONPYCACHEPREFIX=PREFIX: they read this bytecode
(checked against each source's size and time as always) and write none. Candidates cannot write
here: the cache is read-only in the sandbox.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = False
sys.pycache_prefix = os.path.abspath(sys.argv[1])
sys.path.insert(0, HERE)

import compileall  # noqa: E402

import torch  # noqa: E402,F401
import torch.autograd.profiler  # noqa: E402,F401
import torch.profiler  # noqa: E402,F401
import torch.utils.cpp_extension  # noqa: E402,F401

import harness  # noqa: E402,F401  (what it imports of torch and the standard library)
import ext  # noqa: E402,F401

compileall.compile_dir(HERE, maxlevels=0, quiet=1)  # the harness's own modules
print(sys.pycache_prefix)
