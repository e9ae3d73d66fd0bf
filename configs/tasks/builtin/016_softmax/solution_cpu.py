"""Honest CPU solution for builtin task 016_softmax: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor softmax_forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2, "softmax: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    float* out = yp + r * cols;

    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, row[c]);
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t c = 0; c < cols; ++c) out[c] = std::exp(row[c] - m) * inv;
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_016_softmax_cpu",
    cpp_sources=cpp_source,
    functions=['softmax_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_forward(x)
