import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
static torch::Tensor relu_into(const torch::Tensor& xc, torch::Tensor out, int64_t shift, int64_t block) {
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel();
  const int64_t end = block > 1 ? (n / block) * block : n;  // block > 1 forgets the tail
  for (int64_t i = 0; i < end; ++i) {
    int64_t j = i + shift < n ? i + shift : i;
    o[i] = in[j] > 0.f ? in[j] : 0.f;
  }
  return out;
}
torch::Tensor relu_wrong_index(torch::Tensor x) {
  auto xc = x.contiguous();
  return relu_into(xc, torch::empty_like(xc), 1, 1);
}
torch::Tensor relu_no_tail(torch::Tensor x) {
  auto xc = x.contiguous();
  return relu_into(xc, torch::zeros_like(xc), 0, 16);
}
torch::Tensor relu_empty(torch::Tensor x) { return torch::empty_like(x); }
torch::Tensor relu_inplace(torch::Tensor x) {
  float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] > 0.f ? p[i] : 0.f;
  return x;
}
torch::Tensor relu_ok(torch::Tensor x) {
  auto xc = x.contiguous();
  return relu_into(xc, torch::empty_like(xc), 0, 1);
}
torch::Tensor rowsum_wrong_reduction(torch::Tensor x) {
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto out = torch::empty({rows}, xc.options());
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float acc = in[r * cols];
    for (int64_t c = 1; c < cols; ++c) acc = acc > in[r * cols + c] ? acc : in[r * cols + c];  // max, not sum
    o[r] = acc;
  }
  return out;
}
"""

ext = load_inline(name="mutants", cpp_sources=cpp_source,
                  functions=["relu_wrong_index", "relu_no_tail", "relu_empty", "relu_inplace", "relu_ok",
                             "rowsum_wrong_reduction"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_ok(x)
