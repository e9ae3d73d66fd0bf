"""Honest CPU solution for builtin task 021_bias_gelu: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor bias_gelu_forward(torch::Tensor x, torch::Tensor bias) {
  auto xc = x.contiguous();
  auto bc = bias.contiguous();
  const int64_t cols = bc.numel();
  TORCH_CHECK(xc.size(-1) == cols, "bias_gelu: bias does not match the last dimension");
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i] + bp[i % cols];
    yp[i] = 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_021_bias_gelu_cpu",
    cpp_sources=cpp_source,
    functions=['bias_gelu_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.bias_gelu_forward(x, self.bias)
