import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor broken(torch::Tensor x) {
  return x.this_method_does_not_exist();
}
"""

ext = load_inline(name="broken", cpp_sources=cpp_source, functions=["broken"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.broken(x)
