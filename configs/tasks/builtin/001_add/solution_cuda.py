"""Honest CUDA solution for builtin task 001_add: real __global__ kernels built with load_inline."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <vector>

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.sizes() == b.sizes(), "add: expected two CUDA tensors of one shape");
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto y = torch::empty_like(ac);
  const int64_t n = ac.numel();
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535 * 8);
  if (n > 0) {
    add_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor add_forward(torch::Tensor a, torch::Tensor b);
"""

ext = load_inline(
    name="dice_builtin_001_add_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['add_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add_forward(a, b)
