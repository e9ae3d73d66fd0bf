"""Honest CPU solution for builtin task 004_scale_bias: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor scale_bias_forward(torch::Tensor x, double scale, double bias) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float scale_f = static_cast<float>(scale);
  const float bias_f = static_cast<float>(bias);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    yp[i] = v * scale_f + bias_f;
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_004_scale_bias_cpu",
    cpp_sources=cpp_source,
    functions=['scale_bias_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale, bias):
        super().__init__()
        self.scale = scale
        self.bias = bias

    def forward(self, x):
        return ext.scale_bias_forward(x, self.scale, self.bias)
