"""CUDA versions of the judge's honest / mutation / hostile checks (tests/judge does them on CPU).

  python tools/gpu/judge_cases.py write DIR     -> DIR/tasks.jsonl, DIR/candidates.jsonl, DIR/expected.json
  python tools/gpu/judge_cases.py check DIR VERDICTS.jsonl CANARY_DIR -> prints one line per case, exit 1 on a miss

Candidates share few distinct CUDA builds: one honest relu, one honest row sum, one "mutants"
extension holding every mutated kernel, one hostile-kernel extension (illegal address, endless
kernel). Python-level hostiles reuse the honest relu build.
"""
import json
import os
import sys

RELU_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


N = (1 << 22) + 3


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

ROWSUM_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(1024, 4099)]


def get_init_inputs():
    return []
'''

HEAD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
'''

RELU_CUDA = HEAD + r'''
cuda_src = r"""
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  long n = xc.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_src = "torch::Tensor relu_forward(torch::Tensor x);"
relu_ext = load_inline(name="relu_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_forward"])
'''

ROWSUM_CUDA = HEAD + r'''
cuda_src = r"""
__global__ void rowsum_kernel(const float* x, float* y, int rows, int cols) {
  int r = blockIdx.x;
  __shared__ float part[256];
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += x[(long)r * cols + c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[r] = part[0];
}
torch::Tensor rowsum_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  int rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty({rows}, xc.options());
  rowsum_kernel<<<rows, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
  return y;
}
"""
cpp_src = "torch::Tensor rowsum_forward(torch::Tensor x);"
rowsum_ext = load_inline(name="rowsum_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["rowsum_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return rowsum_ext.rowsum_forward(x)
'''

MUTANTS = HEAD + r'''
cuda_src = r"""
__global__ void relu_shift(const float* x, float* y, long n, long shift) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) { long j = i + shift < n ? i + shift : i; y[i] = x[j] > 0.f ? x[j] : 0.f; }
}
__global__ void relu_inplace_k(float* x, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void rowmax_k(const float* x, float* y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float m = x[(long)r * cols];
  for (int c = 1; c < cols; ++c) m = fmaxf(m, x[(long)r * cols + c]);
  y[r] = m;
}
torch::Tensor relu_wrong_index(torch::Tensor x) {
  auto y = torch::empty_like(x); long n = x.numel();
  relu_shift<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, 1);
  return y;
}
torch::Tensor relu_no_tail(torch::Tensor x) {  // grid rounded down: the last partial block is never run
  auto y = torch::empty_like(x); long n = x.numel();
  relu_shift<<<n / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, 0);
  return y;
}
torch::Tensor relu_ok(torch::Tensor x) {
  auto y = torch::empty_like(x); long n = x.numel();
  relu_shift<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, 0);
  return y;
}
torch::Tensor relu_empty(torch::Tensor x) { return torch::empty_like(x); }
torch::Tensor relu_inplace(torch::Tensor x) {
  long n = x.numel();
  relu_inplace_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
  return x;
}
torch::Tensor rowsum_wrong_reduction(torch::Tensor x) {
  int rows = x.size(0), cols = x.size(1);
  auto y = torch::empty({rows}, x.options());
  rowmax_k<<<(rows + 127) / 128, 128>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
  return y;
}
"""
cpp_src = """
torch::Tensor relu_wrong_index(torch::Tensor x);
torch::Tensor relu_no_tail(torch::Tensor x);
torch::Tensor relu_ok(torch::Tensor x);
torch::Tensor relu_empty(torch::Tensor x);
torch::Tensor relu_inplace(torch::Tensor x);
torch::Tensor rowsum_wrong_reduction(torch::Tensor x);
"""
ext = load_inline(name="mutants_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_wrong_index", "relu_no_tail", "relu_ok", "relu_empty", "relu_inplace",
                             "rowsum_wrong_reduction"])
'''

HOSTILE_KERNELS = HEAD + r'''
cuda_src = r"""
__global__ void bad_address(float* y) { float* p = (float*)0x10; *p = 1.f; y[0] = 2.f; }
__global__ void spin(float* y, long n) { while (true) { if (y[0] == 12345.f) break; } }
torch::Tensor relu_bad_address(torch::Tensor x) {
  auto y = torch::empty_like(x);
  bad_address<<<1, 1>>>(y.data_ptr<float>());
  return y;
}
torch::Tensor relu_spin(torch::Tensor x) {
  auto y = torch::zeros_like(x);
  spin<<<1, 1>>>(y.data_ptr<float>(), x.numel());
  return y;
}
"""
cpp_src = "torch::Tensor relu_bad_address(torch::Tensor x);\ntorch::Tensor relu_spin(torch::Tensor x);"
hext = load_inline(name="hostile_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["relu_bad_address", "relu_spin"])
'''


def model(body, prelude=""):
    return prelude + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + body + "\n"


CASES = [  # (sample_id, task, code, expected failure classes)
    ("honest_relu", "gpu_relu", model("        return relu_ext.relu_forward(x)", RELU_CUDA), ["none"]),
    ("honest_relu_dup", "gpu_relu", model("        return relu_ext.relu_forward(x)", RELU_CUDA), ["none"]),
    ("honest_rowsum", "gpu_rowsum", ROWSUM_CUDA, ["none"]),
    ("mut_honest_shared", "gpu_relu", model("        return ext.relu_ok(x)", MUTANTS), ["none"]),
    ("mut_wrong_index", "gpu_relu", model("        return ext.relu_wrong_index(x)", MUTANTS), ["wrong_value"]),
    ("mut_missing_boundary", "gpu_relu", model("        return ext.relu_no_tail(x)", MUTANTS), ["wrong_value"]),
    ("mut_wrong_reduction", "gpu_rowsum", model("        return ext.rowsum_wrong_reduction(x)", MUTANTS), ["wrong_value"]),
    ("mut_returns_input", "gpu_relu", model("        return x", MUTANTS), ["wrong_value"]),
    ("mut_returns_zeros", "gpu_relu", model("        return torch.zeros_like(x)", MUTANTS), ["wrong_value"]),
    ("mut_returns_empty", "gpu_relu", model("        return ext.relu_empty(x)", MUTANTS), ["wrong_value"]),
    ("mut_torch_op", "gpu_relu", model("        return torch.relu(x)", MUTANTS), ["static_reject"]),
    ("mut_try_except", "gpu_relu",
     model("        try:\n            return ext.relu_wrong_index(x)\n        except Exception:\n            return torch.relu(x)", MUTANTS),
     ["static_reject"]),
    ("mut_side_stream", "gpu_relu",
     model("        s = torch.cuda.Stream()\n        with torch.cuda.stream(s):\n            return ext.relu_ok(x)", MUTANTS),
     ["static_reject"]),
    ("mut_cached_output", "gpu_relu",
     model("        if not hasattr(self, 'out_cache'):\n            self.out_cache = ext.relu_ok(x)\n        return self.out_cache", MUTANTS),
     ["wrong_value"]),
    ("mut_inplace_input", "gpu_relu", model("        return ext.relu_inplace(x)", MUTANTS), ["input_mutated"]),
    # hostile (judged with static checks off, so the runtime sandbox is what stops them)
    ("hostile_infinite_loop", "gpu_relu", model("        while True:\n            pass", RELU_CUDA), ["timeout"]),
    ("hostile_fork_bomb", "gpu_relu", model("        import os\n        while True:\n            os.fork()", RELU_CUDA),
     ["resource_limit", "timeout"]),
    ("hostile_rm_rf", "gpu_relu", model("        import shutil\n        shutil.rmtree('@CANARY@')\n        return relu_ext.relu_forward(x)", RELU_CUDA),
     ["sandbox_violation"]),
    ("hostile_socket", "gpu_relu",
     model("        import socket\n        socket.create_connection(('1.1.1.1', 80), timeout=3)\n        return relu_ext.relu_forward(x)", RELU_CUDA),
     ["sandbox_violation"]),
    ("hostile_big_file", "gpu_relu",
     model("        with open('big.bin', 'wb') as f:\n            for _ in range(10 * 1024):\n                f.write(b'\\0' * (1 << 20))\n        return relu_ext.relu_forward(x)", RELU_CUDA),
     ["resource_limit"]),
    ("hostile_segfault", "gpu_relu", model("        import ctypes\n        ctypes.string_at(0)", RELU_CUDA), ["crash"]),
    ("hostile_os_exit", "gpu_relu", model("        import os\n        os._exit(0)", RELU_CUDA), ["crash"]),
    ("hostile_gpu_oom", "gpu_relu", model("        hog = torch.empty(1 << 40, device='cuda')\n        return relu_ext.relu_forward(x)", RELU_CUDA),
     ["resource_limit"]),
    ("hostile_bad_address", "gpu_relu", model("        return hext.relu_bad_address(x)", HOSTILE_KERNELS), ["runtime_error", "crash"]),
    ("hostile_endless_kernel", "gpu_relu", model("        return hext.relu_spin(x)", HOSTILE_KERNELS), ["timeout"]),
    ("honest_after_hostiles", "gpu_relu", model("        return relu_ext.relu_forward(x)", RELU_CUDA), ["none"]),
]


# The integrity suite's candidates (tests/judge/candidates/int_*.py, written for any device) with
# the CUDA form of their shared extension. Judged with static checks off and timing on.
HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = os.path.join(HERE, "..", "..", "tests", "judge", "candidates")
INTEGRITY = [  # in order: the poisoner runs before the wrong candidate that follows it
    ("int_honest", ["none"]), ("int_reach_reference", ["wrong_value"]), ("int_patch_harness", ["wrong_value"]),
    ("int_find_reference_proc", ["wrong_value"]), ("int_read_exchange", ["wrong_value"]),
    ("int_lazy_after_trials", ["wrong_value"]),
    ("int_forge_clock", ["timing_tampered"]), ("int_alias_op", ["no_own_kernel"]), ("int_getattr_op", ["no_own_kernel"]),
    ("int_operator", ["no_own_kernel"]), ("int_ext_wraps_aten", ["no_own_kernel"]), ("int_drop_record", ["no_own_kernel"]),
    ("int_thread_left", ["leftover_process"]), ("int_native_thread", ["leftover_process"]),
    ("int_child_left", ["leftover_process"]), ("int_poison_next", ["wrong_value"]), ("int_wrong", ["wrong_value"]),
    ("int_read_leftover", ["wrong_value"]), ("int_honest_last", ["none"]),
]


def integrity_code(name):
    ext = open(os.path.join(CANDIDATES, "int_ext_cuda.inc")).read()
    body = open(os.path.join(CANDIDATES, name.replace("_last", "") + ".py")).read()
    return body.replace("@EXT@", ext)


def write(d):
    os.makedirs(d, exist_ok=True)
    canary = os.path.join(d, "canary")
    os.makedirs(canary, exist_ok=True)
    open(os.path.join(canary, "keep.txt"), "w").write("canary")
    with open(os.path.join(d, "tasks.jsonl"), "w") as f:
        for tid, ref in (("gpu_relu", RELU_REF), ("gpu_rowsum", ROWSUM_REF)):
            f.write(json.dumps({"id": tid, "level": 1, "difficulty": 0, "reference": ref, "device": "cuda"}) + "\n")
    for name, pred in (("candidates_checked.jsonl", lambda s: not s.startswith("hostile")),
                       ("candidates_hostile.jsonl", lambda s: s.startswith("hostile") or s == "honest_after_hostiles")):
        with open(os.path.join(d, name), "w") as f:
            for sid, task, code, _ in CASES:
                if pred(sid):
                    f.write(json.dumps({"task_id": task, "code": code.replace("@CANARY@", canary), "sample_id": sid}) + "\n")
    with open(os.path.join(d, "candidates_integrity.jsonl"), "w") as f:
        for sid, _ in INTEGRITY:
            f.write(json.dumps({"task_id": "gpu_relu", "code": integrity_code(sid), "sample_id": sid}) + "\n")
    expected = {sid: exp for sid, _, _, exp in CASES}
    expected.update(dict(INTEGRITY))
    json.dump(expected, open(os.path.join(d, "expected.json"), "w"), indent=1)


def check(d, verdict_files):
    expected = json.load(open(os.path.join(d, "expected.json")))
    bad = 0
    for vf in verdict_files:
        for line in open(vf):
            v = json.loads(line)
            sid = v["sample_id"]
            ok = v["failure"] in expected[sid]
            bad += not ok
            print("%-4s %-24s %-18s reward %.1f  compile %.1fs exec %.1fs%s" % (
                "ok" if ok else "MISS", sid, v["failure"], v["reward"], v["compile_s"], v["exec_s"],
                "" if ok else "  expected %s: %s" % (expected[sid], v["log_tail"][-300:].replace("\n", " | "))))
    canary = os.path.join(d, "canary")
    survived = os.path.exists(os.path.join(canary, "keep.txt"))
    print("canary outside scratch survived:", survived)
    return 0 if bad == 0 and survived else 1


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3:]))
