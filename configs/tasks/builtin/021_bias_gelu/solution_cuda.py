"""Honest CUDA solution for builtin task 021_bias_gelu: real __global__ kernels built with load_inline."""
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

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i] + b[i % cols];
    y[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  }
}

torch::Tensor bias_gelu_forward(torch::Tensor x, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "bias_gelu: expected CUDA tensors");
  auto xc = x.contiguous();
  auto bc = bias.contiguous();
  const int64_t cols = bc.numel();
  TORCH_CHECK(xc.size(-1) == cols, "bias_gelu: bias does not match the last dimension");
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535 * 8);
  if (n > 0) {
    bias_gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), bc.data_ptr<float>(),
                                                                               y.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor bias_gelu_forward(torch::Tensor x, torch::Tensor bias);
"""

ext = load_inline(
    name="dice_builtin_021_bias_gelu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['bias_gelu_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.bias_gelu_forward(x, self.bias)
