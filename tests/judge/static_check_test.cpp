// Static anti-hack checks: each hack is caught with its line; honest code and look-alikes are not.
#include "dice/judge/static_check.h"

#include <gtest/gtest.h>

#include <string>

#include "dice/config/config.h"
#include "dice/util/error.h"

namespace dice::judge {
namespace {

// An honest CUDA candidate; hacks below are built by editing it.
const std::string kHonestCuda = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
// a comment mentioning std::thread and cudaStreamCreate must not count
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const char* msg = "__half is only in a string";
  relu_kernel<<<(x.numel() + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""

cpp_source = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(name="relu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu"])


class ModelNew(nn.Module):
    """Calls the kernel; torch.matmul(x) in a docstring is fine."""

    def __init__(self):
        super().__init__()
        self.scale = 1.0

    @torch.no_grad()
    def forward(self, x):
        # torch.softmax(x) in a comment is fine
        x = x.contiguous().view(-1)
        out = torch.empty_like(x)
        if x.size(0) == 0:
            return out
        return ext.relu(x).reshape(x.shape)
)PY";

const std::string kHonestCpu = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
  auto y = torch::empty_like(a);
  for (int64_t i = 0; i < a.numel(); ++i) y.data_ptr<float>()[i] = a.data_ptr<float>()[i] + b.data_ptr<float>()[i];
  return y;
}
"""

ext = load_inline(name="add_ext", cpp_sources=cpp_source, functions=["add"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add(a, b)
)PY";

// Inserts `line` after the first occurrence of `anchor` (which ends a line).
std::string insert_after(std::string code, const std::string& anchor, const std::string& line) {
  const size_t pos = code.find(anchor);
  EXPECT_NE(pos, std::string::npos) << anchor;
  return code.insert(pos + anchor.size(), line);
}

std::vector<Finding> of(const std::vector<Finding>& all, const std::string& check) {
  std::vector<Finding> out;
  for (const auto& f : all)
    if (f.check == check) out.push_back(f);
  return out;
}

std::string describe(const std::vector<Finding>& fs) {
  std::string s;
  for (const auto& f : fs) s += f.check + "/" + f.severity + ": " + f.detail + "\n";
  return s;
}

// The check fires, with reject/warn per the defaults, and names `line` when given.
void expect_fires(const std::string& code, const std::string& check, int line = 0, const std::string& device = "cuda") {
  const auto all = static_check(code, device, StaticCheckConfig{});
  const auto hits = of(all, check);
  ASSERT_FALSE(hits.empty()) << check << " did not fire; findings:\n" << describe(all);
  EXPECT_EQ(hits[0].severity, StaticCheckConfig{}.for_level(0).mode(check));  // no level given: "auto" is "reject"
  if (line > 0) {
    bool found = false;
    for (const auto& h : hits) found = found || h.detail.rfind("line " + std::to_string(line) + ":", 0) == 0;
    EXPECT_TRUE(found) << "no " << check << " finding on line " << line << ":\n" << describe(hits);
  }
}

int line_of(const std::string& code, const std::string& needle) {
  const size_t pos = code.find(needle);
  EXPECT_NE(pos, std::string::npos) << needle;
  return 1 + static_cast<int>(std::count(code.begin(), code.begin() + static_cast<long>(pos), '\n'));
}

TEST(StaticCheck, HonestCandidatesAreClean) {
  EXPECT_TRUE(static_check(kHonestCuda, "cuda", {}).empty()) << describe(static_check(kHonestCuda, "cuda", {}));
  EXPECT_TRUE(static_check(kHonestCpu, "cpu", {}).empty()) << describe(static_check(kHonestCpu, "cpu", {}));
}

TEST(StaticCheck, NoModelNew) {
  std::string code = kHonestCpu;
  code.replace(code.find("class ModelNew"), 14, "class Solution");
  expect_fires(code, "no_model_new", 0, "cpu");
}

TEST(StaticCheck, NoKernel) {
  // CUDA form whose only __global__ is in a C++ comment
  std::string code = kHonestCuda;
  code.replace(code.find("__global__ void"), 10, "/*__global__*/ static");
  expect_fires(code, "no_kernel");
  // CUDA form: a kernel string that is never built
  std::string unbuilt = kHonestCuda;
  unbuilt.replace(unbuilt.find("ext = load_inline("), 18, "ext = make_module(");
  unbuilt.replace(unbuilt.find("from torch.utils.cpp_extension import load_inline"), 49, "import os");
  expect_fires(unbuilt, "no_kernel");
  // a kernel that is defined but never launched
  std::string dead = kHonestCuda;
  const size_t launch = dead.find("  relu_kernel<<<");
  dead.erase(launch, dead.find("x.numel());\n", launch) + 12 - launch);
  expect_fires(dead, "no_kernel");
  // CPU form without any C++ source or build
  const std::string plain = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return a\n";
  expect_fires(plain, "no_kernel", 0, "cpu");
  // the honest CPU form judged as CUDA has no __global__
  expect_fires(kHonestCpu, "no_kernel", 0, "cuda");
}

TEST(StaticCheck, TorchOpsInForward) {
  const std::string anchor = "        out = torch.empty_like(x)\n";
  for (const char* op : {"        y = torch.matmul(x, x)\n", "        y = F.relu(x)\n",
                         "        y = torch.nn.functional.gelu(x)\n", "        y = x @ x\n", "        y = x.sum(dim=0)\n",
                         "        y = torch.softmax(x, dim=0)\n", "        y = x.exp()\n", "        y = torch.ops.aten.mm(x, x)\n",
                         "        y = torch.linalg.norm(x)\n", "        y = super().forward(x)\n"}) {
    const std::string code = insert_after(kHonestCuda, anchor, op);
    SCOPED_TRACE(op);
    expect_fires(code, "torch_op_in_forward", line_of(code, op + 8));
  }
  // an nn layer built in __init__ and called in forward
  std::string layer = insert_after(kHonestCuda, "        self.scale = 1.0\n", "        self.fc = nn.Linear(4, 4)\n");
  layer = insert_after(layer, anchor, "        x = self.fc(x)\n");
  expect_fires(layer, "torch_op_in_forward", line_of(layer, "x = self.fc(x)"));
  // a module-level helper called from forward
  std::string helper = insert_after(kHonestCuda, "cpp_source = \"torch::Tensor relu(torch::Tensor x);\"\n",
                                    "\n\ndef _fallback(x):\n    return torch.relu(x)\n");
  helper = insert_after(helper, anchor, "        return _fallback(x)\n");
  expect_fires(helper, "torch_op_in_forward", line_of(helper, "return torch.relu(x)"));
  // names bound by from-imports and module aliases are resolved
  std::string from = insert_after(kHonestCuda, "import torch.nn as nn\n", "from torch.nn.functional import relu as r\n");
  from = insert_after(from, anchor, "        y = r(x)\n");
  expect_fires(from, "torch_op_in_forward", line_of(from, "y = r(x)"));
  std::string alias = insert_after(kHonestCuda, "import torch.nn as nn\n", "import torch.nn.functional as Fn\n");
  alias = insert_after(alias, anchor, "        y = Fn.softmax(x, dim=0)\n");
  expect_fires(alias, "torch_op_in_forward", line_of(alias, "Fn.softmax"));
  // an extension kept on self is the candidate's own code; a layer next to it is still caught
  std::string self_ext = insert_after(kHonestCuda, "        self.scale = 1.0\n",
                                      "        self.ext = load_inline(name=\"e\", cpp_sources=cpp_source, functions=[\"relu\"])\n"
                                      "        self.fc = nn.Linear(4, 4)\n");
  self_ext = insert_after(self_ext, anchor, "        y = self.ext.relu(x)\n");
  EXPECT_TRUE(of(static_check(self_ext, "cuda", {}), "torch_op_in_forward").empty())
      << describe(static_check(self_ext, "cuda", {}));
  self_ext = insert_after(self_ext, "        y = self.ext.relu(x)\n", "        y = self.fc(y)\n");
  expect_fires(self_ext, "torch_op_in_forward", line_of(self_ext, "y = self.fc(y)"));
  // torch ops outside forward (module level, __init__) are fine
  std::string init = insert_after(kHonestCuda, "        self.scale = 1.0\n", "        self.w = torch.randn(4).sum()\n");
  EXPECT_TRUE(of(static_check(init, "cuda", {}), "torch_op_in_forward").empty());
}

// torch_op_in_forward follows the run-time library_ops rule by default: a level-2 answer that keeps a
// library convolution and fuses its epilogue in its own kernel is a warning there, a reject on level 1
// (and where no level is known).
TEST(StaticCheck, TorchOpsInForwardByLevel) {
  const std::string code = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n", "        x = F.conv2d(x, x)\n");
  const auto severity = [&](const StaticCheckConfig& cfg) {
    const auto found = of(static_check(code, "cuda", cfg), "torch_op_in_forward");
    return found.empty() ? std::string("none") : found[0].severity;
  };
  const StaticCheckConfig defaults;
  EXPECT_EQ(defaults.torch_op_in_forward, "auto");
  EXPECT_EQ(severity(defaults.for_level(1)), "reject");
  EXPECT_EQ(severity(defaults.for_level(0)), "reject");
  EXPECT_EQ(severity(defaults.for_level(2)), "warn");
  EXPECT_EQ(severity(defaults.for_level(3)), "warn");
  EXPECT_EQ(severity(defaults), "reject");  // no level given
  StaticCheckConfig strict;
  strict.torch_op_in_forward = "reject";
  EXPECT_EQ(severity(strict.for_level(2)), "reject");  // an explicit mode is kept at every level
  StaticCheckConfig off;
  off.torch_op_in_forward = "off";
  EXPECT_EQ(severity(off.for_level(1)), "none");
}

TEST(StaticCheck, TryExcept) {
  const std::string code = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n",
                                        "        try:\n            return ext.relu(x)\n        except Exception:\n"
                                        "            pass\n");
  expect_fires(code, "try_except", line_of(code, "try:"));
}

TEST(StaticCheck, InheritsModel) {
  std::string code = kHonestCuda;
  code.replace(code.find("class ModelNew(nn.Module)"), 25, "class ModelNew(Model)");
  expect_fires(code, "inherits_model", line_of(code, "class ModelNew(Model)"));
  EXPECT_FALSE(has_reject(of(static_check(code, "cuda", {}), "inherits_model")));  // warn by default
}

TEST(StaticCheck, Streams) {
  const std::string py = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n",
                                      "        s = torch.cuda.Stream()\n");
  expect_fires(py, "stream", line_of(py, "torch.cuda.Stream()"));
  std::string cpp = kHonestCuda;
  cpp = insert_after(cpp, "  auto y = torch::empty_like(x);\n", "  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n");
  expect_fires(cpp, "stream", line_of(cpp, "cudaStreamCreateWithFlags"));
}

TEST(StaticCheck, Threads) {
  const std::string py = insert_after(kHonestCuda, "import torch.nn as nn\n", "import threading\n");
  expect_fires(py, "thread", 3);
  const std::string cpp = insert_after(kHonestCuda, "  auto y = torch::empty_like(x);\n", "  std::thread t([] {});\n");
  expect_fires(cpp, "thread", line_of(cpp, "std::thread t"));
  const std::string cf = insert_after(kHonestCuda, "import torch.nn as nn\n", "from concurrent.futures import ThreadPoolExecutor\n");
  expect_fires(cf, "thread", 3);
}

TEST(StaticCheck, MonkeyPatch) {
  for (const char* patch : {"torch.cuda.synchronize = lambda: None\n", "time.perf_counter = lambda: 0.0\n",
                            "torch.allclose = lambda *a, **k: True\n", "builtins.print = None\n",
                            "torch.cuda.Event.elapsed_time = lambda self, o: 0.001\n", "setattr(torch, 'allclose', f)\n",
                            "Model.forward = lambda self, x: x\n", "x, torch.testing.assert_close = 1, None\n"}) {
    const std::string code = insert_after(kHonestCuda, "cpp_source = \"torch::Tensor relu(torch::Tensor x);\"\n", patch);
    SCOPED_TRACE(patch);
    expect_fires(code, "monkey_patch", line_of(code, patch));
  }
  // aliases are resolved
  std::string alias = insert_after(kHonestCuda, "import torch.nn as nn\n", "import torch as T\nT.allclose = None\n");
  expect_fires(alias, "monkey_patch", 4);
  // comparisons, keyword arguments, attributes of self and plain names are not patches
  const std::string fine = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n",
                                        "        ok = torch.numel(x) == 3\n        self.torch = 1\n        time = 3\n"
                                        "        y = torch.empty(3, dtype=torch.float32)\n");
  EXPECT_TRUE(of(static_check(fine, "cuda", {}), "monkey_patch").empty()) << describe(static_check(fine, "cuda", {}));
}

TEST(StaticCheck, Caching) {
  const std::string mod = insert_after(kHonestCuda, "cpp_source = \"torch::Tensor relu(torch::Tensor x);\"\n", "_cache = {}\n");
  expect_fires(mod, "caching", line_of(mod, "_cache = {}"));
  const std::string lru = insert_after(kHonestCuda, "import torch.nn as nn\n", "import functools\n\n@functools.lru_cache(8)\ndef f(x):\n    return x\n");
  expect_fires(lru, "caching", line_of(lru, "lru_cache"));
  const std::string attr = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n", "        self.cached_out = out\n");
  expect_fires(attr, "caching", line_of(attr, "self.cached_out"));
  EXPECT_FALSE(has_reject(static_check(attr, "cuda", {})));  // warn by default
  // a non-empty module-level list (e.g. of sources) is not a cache
  const std::string list = insert_after(kHonestCuda, "cpp_source = \"torch::Tensor relu(torch::Tensor x);\"\n", "sources = [cpp_source]\n");
  EXPECT_TRUE(of(static_check(list, "cuda", {}), "caching").empty());
}

TEST(StaticCheck, PrecisionDowngrade) {
  const std::string py = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n", "        x = x.half()\n");
  expect_fires(py, "precision_downgrade", line_of(py, "x.half()"));
  const std::string cpp = insert_after(kHonestCuda, "  auto y = torch::empty_like(x);\n", "  __half h = __float2half(1.f);\n");
  expect_fires(cpp, "precision_downgrade", line_of(cpp, "__half h"));
  const std::string tf32 = insert_after(kHonestCuda, "cpp_source = \"torch::Tensor relu(torch::Tensor x);\"\n",
                                        "torch.backends.cuda.matmul.allow_tf32 = True\n");
  expect_fires(tf32, "precision_downgrade", line_of(tf32, "allow_tf32"));
  expect_fires(tf32, "monkey_patch", line_of(tf32, "allow_tf32"));
}

TEST(StaticCheck, ModesFromConfig) {
  const std::string code = insert_after(kHonestCuda, "        out = torch.empty_like(x)\n", "        y = torch.matmul(x, x)\n");
  EXPECT_TRUE(has_reject(static_check(code, "cuda", {})));
  auto cfg = config::load<StaticCheckConfig>(YAML::Load("torch_op_in_forward: warn\nstream: off\n"));
  const auto fs = static_check(code, "cuda", cfg);
  ASSERT_EQ(of(fs, "torch_op_in_forward").size(), 1u);
  EXPECT_EQ(of(fs, "torch_op_in_forward")[0].severity, "warn");
  EXPECT_FALSE(has_reject(fs));
  cfg.torch_op_in_forward = "off";
  EXPECT_TRUE(static_check(code, "cuda", cfg).empty());
  EXPECT_THROW(config::load<StaticCheckConfig>(YAML::Load("stream: sometimes\n")), Error);
  EXPECT_THROW(config::load<StaticCheckConfig>(YAML::Load("streams: off\n")), Error);
  EXPECT_THROW(cfg.mode("nope"), Error);
  EXPECT_EQ(static_check_names().size(), 10u);
  for (const auto& n : static_check_names()) EXPECT_NO_THROW(cfg.mode(n));
}

TEST(StaticCheck, OddInputNeverCrashes) {
  const std::string inputs[] = {"", "'''", "\"", "r'\\", "class ModelNew(:\n  def forward(\n", std::string(5000, '('),
                                "#\n#\n\"\"\"\n__global__", std::string("\0\xff\xfe'\"#@", 8)};
  for (const auto& in : inputs) {
    EXPECT_NO_THROW(static_check(in, "cuda", {}));
    EXPECT_NO_THROW(static_check(in, "cpu", {}));
  }
  EXPECT_THROW(static_check("x", "tpu", {}), Error);
  // a big candidate stays fast (linear scan)
  std::string big = kHonestCuda;
  for (int i = 0; i < 2000; ++i) big += "# filler line with torch.matmul(x) in a comment\nz" + std::to_string(i) + " = 1\n";
  EXPECT_TRUE(of(static_check(big, "cuda", {}), "torch_op_in_forward").empty());
}

}  // namespace
}  // namespace dice::judge
