"""Toolchain identity for the build-cache key: one JSON line on stdout, the last one. Before it, a line
`bytecode_in_place true|false`: whether torch's bytecode lies beside its sources (not part of the key)."""
import importlib.util
import json
import os
import platform
import subprocess
import sys

import torch


def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1]
    except Exception:  # noqa: BLE001
        return ""


info = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(),
    "cxx": (subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True,
                           text=True).stdout.splitlines() or [""])[0],
    "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
}
# Is torch's bytecode beside its sources? (If not, every process that imports torch compiles it.)
sys.pycache_prefix = None
in_place = all(os.path.exists(importlib.util.cache_from_source(f))
               for f in (torch.__file__, torch.nn.functional.__file__, torch._tensor.__file__))
print("bytecode_in_place", "true" if in_place else "false")
if torch.cuda.is_available():
    cap = torch.cuda.get_device_capability(0)
    info["device"] = torch.cuda.get_device_name(0)
    if not info["arch"]:
        info["arch"] = "%d.%d" % cap
    from torch.utils.cpp_extension import CUDA_HOME
    nvcc = os.path.join(CUDA_HOME or "/usr/local/cuda", "bin", "nvcc")
    info["nvcc"] = first_line([nvcc, "--version"])
print(json.dumps(info, sort_keys=True))
