"""Honest CPU solution for builtin task 019_layernorm: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.dim() == 2, "layernorm: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty_like(xc);
  auto weightc = weight.contiguous();
  const float* weightp = weightc.data_ptr<float>();
  auto biasc = bias.contiguous();
  const float* biasp = biasc.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    float* out = yp + r * cols;

    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += row[c];
    const double mean = s / cols;
    double v = 0.0;
    for (int64_t c = 0; c < cols; ++c) v += (row[c] - mean) * (row[c] - mean);
    const double rstd = 1.0 / std::sqrt(v / cols + 1e-5);
    for (int64_t c = 0; c < cols; ++c)
      out[c] = static_cast<float>((row[c] - mean) * rstd) * weightp[c] + biasp[c];
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_019_layernorm_cpu",
    cpp_sources=cpp_source,
    functions=['layernorm_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        # signed, non-trivial affine parameters: a kernel that ignores them fails
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.layernorm_forward(x, self.weight, self.bias)
