import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor rowsum_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto out = torch::empty({rows}, xc.options());
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.f;
    for (int64_t c = 0; c < cols; ++c) acc += in[r * cols + c];
    o[r] = acc;
  }
  return out;
}
"""

rowsum_ext = load_inline(name="rowsum_ext", cpp_sources=cpp_source, functions=["rowsum_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return rowsum_ext.rowsum_forward(x)
