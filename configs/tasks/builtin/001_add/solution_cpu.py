"""Honest CPU solution for builtin task 001_add: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "add: shapes differ");
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto y = torch::empty_like(ac);
  const float* ap = ac.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = ac.numel();
  for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i];
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_001_add_cpu",
    cpp_sources=cpp_source,
    functions=['add_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add_forward(a, b)
