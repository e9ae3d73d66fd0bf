"""Honest CPU solution for builtin task 015_col_sum: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor col_sum_forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2, "col_sum: expected a 2-D tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto acc = std::vector<double>(cols, 0.0);
  const float* xp = xc.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) acc[c] += xp[r * cols + c];
  auto y = torch::empty({cols}, xc.options());
  float* yp = y.data_ptr<float>();
  for (int64_t c = 0; c < cols; ++c) yp[c] = static_cast<float>(acc[c]);
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_015_col_sum_cpu",
    cpp_sources=cpp_source,
    functions=['col_sum_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.col_sum_forward(x)
