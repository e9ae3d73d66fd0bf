"""Honest CPU solution for builtin task 012_row_max: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor row_max_forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2, "row_max: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty({rows}, xc.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    double acc = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = row[c];
      acc = std::max(acc, v);
    }
    yp[r] = static_cast<float>(acc);
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_012_row_max_cpu",
    cpp_sources=cpp_source,
    functions=['row_max_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.row_max_forward(x)
