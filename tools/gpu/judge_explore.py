"""Where a CUDA candidate's build and evaluation spend their time on this machine (one-off probe).

python3 tools/gpu/judge_explore.py OUTDIR
Prints one line per measurement: process start costs (interpreter, import torch, CUDA context,
profiler), the plain load_inline build of a built-in solution command by command, and the same
candidate built as a device-only .cu (nvcc, no torch headers) + host wrapper (g++, with and without
a precompiled torch/extension.h) + pybind main.cpp, linked, loaded and checked against torch.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
PY = sys.executable


def timed(cmd, shell=False, cwd=None, env=None):
    t = time.time()
    r = subprocess.run(cmd, shell=shell, cwd=cwd, capture_output=True, text=True, env=env)
    return time.time() - t, r


def say(*a):
    print(*a, flush=True)


for label, code in [("python -c pass", "pass"), ("import torch", "import torch"),
                    ("import torch + cuda init + op", "import torch; torch.ones(1, device='cuda').sum().item()"),
                    ("... + profiler with CUDA activity",
                     "import torch\nfrom torch.profiler import profile, ProfilerActivity\nx=torch.ones(8,device='cuda')\n"
                     "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p: (x*2).sum().item()\n"
                     "p.events()")]:
    for k in range(2):
        s, r = timed([PY, "-c", code])
        say("process: %-40s %.2f s%s" % (label, s, "" if r.returncode == 0 else " FAILED " + r.stderr[-300:]))

import torch  # noqa: E402
import torch.utils.cpp_extension as cppext  # noqa: E402

tasks = [json.loads(l) for l in open("configs/tasks/builtin_cuda.jsonl")]
sol = tasks[0]["solution"]
cuda_src = re.search(r'cuda_source = r"""(.*?)"""', sol, re.S).group(1)
cpp_src = re.search(r'cpp_source = r"""(.*?)"""', sol, re.S).group(1)
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"

# 1. plain load_inline, then each ninja command on its own
d = os.path.join(OUT, "plain")
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d)
t = time.time()
cppext.load_inline("probe_plain", cpp_src, cuda_sources=cuda_src, functions=["add_forward"],
                   extra_cuda_cflags=["-O3"], build_directory=d, verbose=False)
say("plain load_inline (cold, whole): %.1f s" % (time.time() - t))
ninja = open(os.path.join(d, "build.ninja")).read()
var = lambda k: (re.search(r"^%s = ?(.*)$" % k, ninja, re.M) or [None, ""])[1]  # noqa: E731
shutil.copy(os.path.join(d, "build.ninja"), os.path.join(OUT, "build.ninja.txt"))
cxx, cflags, post = var("cxx") or "c++", var("cflags"), var("post_cflags")
nvcc, cuda_cflags, cuda_post = var("nvcc"), var("cuda_cflags"), var("cuda_post_cflags")
ldflags = var("ldflags")
for label, cmd in [("main.cpp g++ (no PCH)", "%s %s -c main.cpp -o m.o %s" % (cxx, cflags, post)),
                   ("cuda.cu nvcc (as load_inline)", "%s %s -c cuda.cu -o c.o %s" % (nvcc, cuda_cflags, cuda_post)),
                   ("cuda.cu nvcc -time", "%s %s -c cuda.cu -o c2.o %s -time %s/nvcc_time.csv" % (nvcc, cuda_cflags, cuda_post, OUT)),
                   ("link", "%s m.o c.o -shared %s -o x.so" % (cxx, ldflags))]:
    s, r = timed(cmd, shell=True, cwd=d)
    say("plain step: %-32s %.2f s%s" % (label, s, "" if r.returncode == 0 else " FAILED " + r.stderr[-500:]))

# 2. split build by hand: device-only .cu, host wrapper, main.cpp
f = os.path.join(OUT, "split")
shutil.rmtree(f, ignore_errors=True)
os.makedirs(f)
kernel = cuda_src[cuda_src.index("__global__"):cuda_src.index("torch::Tensor add_forward")]
host = cuda_src[cuda_src.index("torch::Tensor add_forward"):]
host = re.sub(r"add_kernel<<<(.*?)>>>\(", r"(__cudaPushCallConfiguration(\1)) ? (void)0 : add_kernel(", host)
open(os.path.join(f, "dev.cu"), "w").write("#include <cuda.h>\n#include <cuda_runtime.h>\n#include <algorithm>\n" + kernel)
hdr = ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAException.h>\n"
       "#include <cuda_runtime.h>\n#include <algorithm>\n"
       'extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim = 1, size_t sharedMem = 0, CUstream_st* stream = 0);\n'
       "void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, int64_t n);\n")
open(os.path.join(f, "host.cpp"), "w").write(hdr + host)
open(os.path.join(f, "main.cpp"), "w").write("#include <torch/extension.h>\n" + cpp_src +
                                             '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_forward", torch::wrap_pybind_function(add_forward), "add_forward"); }\n')
cflags_split = cflags.replace("probe_plain", "probe_split")
dev_flags = " ".join(x for x in cuda_cflags.split() if not x.startswith("-isystem") and not x.startswith("-I"))
cuda_defs = " ".join(x for x in cuda_post.split() if x.startswith("-D__CUDA_NO"))
steps = [("dev.cu nvcc (no torch headers)", "%s %s -c dev.cu -o dev.o %s" % (nvcc, dev_flags, cuda_post)),
         ("host.cpp g++ (no PCH)", "%s %s %s -c host.cpp -o host.o %s" % (cxx, cflags_split, cuda_defs, post)),
         ("main.cpp g++ (no PCH)", "%s %s -c main.cpp -o main.o %s" % (cxx, cflags_split, post))]
for label, cmd in steps:
    s, r = timed(cmd, shell=True, cwd=f)
    say("split step: %-32s %.2f s%s" % (label, s, "" if r.returncode == 0 else " FAILED " + r.stderr[-800:]))
# PCH: torch/extension.h with the .cpp flags, then host/main with it
s, r = timed("mkdir -p pch/dice_full.h.gch && echo '#include <torch/extension.h>' > pch/dice_full.h && "
             "%s %s -x c++-header pch/dice_full.h -o pch/dice_full.h.gch/O0.gch %s" % (cxx, cflags_split, post), shell=True, cwd=f)
say("pch build: %.1f s%s" % (s, "" if r.returncode == 0 else " FAILED " + r.stderr[-500:]))
for name in ("host.cpp", "main.cpp"):
    txt = open(os.path.join(f, name)).read().replace("#include <torch/extension.h>\n", '#include "dice_full.h"\n', 1)
    open(os.path.join(f, "p_" + name), "w").write(txt)
for label, cmd in [("host.cpp g++ PCH", "%s %s %s -Ipch -c p_host.cpp -o host.o %s" % (cxx, cflags_split, cuda_defs, post)),
                   ("host.cpp g++ PCH -H check", "%s %s %s -Ipch -H -fsyntax-only p_host.cpp %s 2>&1 | grep -c '^! '" % (cxx, cflags_split, cuda_defs, post)),
                   ("main.cpp g++ PCH", "%s %s -Ipch -c p_main.cpp -o main.o %s" % (cxx, cflags_split, post)),
                   ("link", "%s main.o host.o dev.o -shared %s -o probe_split.so" % (cxx, ldflags))]:
    s, r = timed(cmd, shell=True, cwd=f)
    say("split step: %-32s %.2f s%s %s" % (label, s, "" if r.returncode == 0 else " FAILED " + r.stderr[-800:], r.stdout.strip()[:40]))
import importlib.util  # noqa: E402
spec = importlib.util.spec_from_file_location("probe_split", os.path.join(f, "probe_split.so"))
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
say("split build runs: max error %.3g" % (m.add_forward(a, b) - (a + b)).abs().max().item())
say("nvcc -time:\n" + open(os.path.join(OUT, "nvcc_time.csv")).read()[-3000:])
