"""Honest CPU solution for builtin task 020_rmsnorm: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight) {
  TORCH_CHECK(x.dim() == 2, "rmsnorm: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty_like(xc);
  auto weightc = weight.contiguous();
  const float* weightp = weightc.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    float* out = yp + r * cols;

    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(row[c]) * row[c];
    const float rstd = static_cast<float>(1.0 / std::sqrt(s / cols + 1e-6));
    for (int64_t c = 0; c < cols; ++c) out[c] = row[c] * rstd * weightp[c];
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_020_rmsnorm_cpu",
    cpp_sources=cpp_source,
    functions=['rmsnorm_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.rmsnorm_forward(x, self.weight)
