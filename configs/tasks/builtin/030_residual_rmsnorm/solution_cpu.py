"""Honest CPU solution for builtin task 030_residual_rmsnorm: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor residual_rmsnorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight) {
  auto xc = x.contiguous();
  auto rc = residual.contiguous();
  auto wc = weight.contiguous();
  const int64_t cols = wc.numel();
  const int64_t rows = xc.numel() / cols;
  TORCH_CHECK(xc.sizes() == rc.sizes() && xc.size(-1) == cols, "residual_rmsnorm: bad shapes");
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  const float* rp = rc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  std::vector<float> h(cols);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      h[c] = xp[r * cols + c] + rp[r * cols + c];
      s += static_cast<double>(h[c]) * h[c];
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(s / cols + 1e-6));
    for (int64_t c = 0; c < cols; ++c) yp[r * cols + c] = h[c] * rstd * wp[c];
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_030_residual_rmsnorm_cpu",
    cpp_sources=cpp_source,
    functions=['residual_rmsnorm_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x, residual):
        return ext.residual_rmsnorm_forward(x, residual, self.weight)
