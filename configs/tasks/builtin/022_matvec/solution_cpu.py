"""Honest CPU solution for builtin task 022_matvec: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor matvec_forward(torch::Tensor A, torch::Tensor x) {
  auto Ac = A.contiguous();
  auto xc = x.contiguous();
  const int64_t M = Ac.size(0), K = Ac.size(1);
  TORCH_CHECK(xc.numel() == K, "matvec: vector length does not match");
  auto y = torch::empty({M, 1}, Ac.options());
  const float* ap = Ac.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < M; ++i) {
    float s = 0.f;
    for (int64_t k = 0; k < K; ++k) s += ap[i * K + k] * xp[k];
    yp[i] = s;
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_022_matvec_cpu",
    cpp_sources=cpp_source,
    functions=['matvec_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return ext.matvec_forward(A, x)
