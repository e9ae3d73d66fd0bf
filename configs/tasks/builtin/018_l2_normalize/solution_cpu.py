"""Honest CPU solution for builtin task 018_l2_normalize: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor l2_normalize_forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2, "l2_normalize: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    float* out = yp + r * cols;

    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(row[c]) * row[c];
    const float inv = 1.f / std::max(static_cast<float>(std::sqrt(s)), 1e-12f);
    for (int64_t c = 0; c < cols; ++c) out[c] = row[c] * inv;
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_018_l2_normalize_cpu",
    cpp_sources=cpp_source,
    functions=['l2_normalize_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.l2_normalize_forward(x)
