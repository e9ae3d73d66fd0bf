"""Honest CPU solution for builtin task 003_leaky_relu: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor leaky_relu_forward(torch::Tensor x, double negative_slope) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float negative_slope_f = static_cast<float>(negative_slope);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    yp[i] = v >= 0.f ? v : v * negative_slope_f;
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_003_leaky_relu_cpu",
    cpp_sources=cpp_source,
    functions=['leaky_relu_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return ext.leaky_relu_forward(x, self.negative_slope)
