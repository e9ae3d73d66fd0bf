"""Honest CUDA solution for builtin task 030_residual_rmsnorm: real __global__ kernels built with load_inline."""
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

constexpr int kThreads = 256;

// Block-wide reductions over kThreads threads; every thread gets the result.
__device__ float block_sum(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = fmaxf(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

__global__ void residual_rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ res,
                                        const float* __restrict__ w, float* __restrict__ y, int64_t cols) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * cols;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float h = x[base + c] + res[base + c];
    s += h * h;
  }
  const float rstd = rsqrtf(block_sum(s, smem) / (float)cols + 1e-6f);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) y[base + c] = (x[base + c] + res[base + c]) * rstd * w[c];
}

torch::Tensor residual_rmsnorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight) {
  TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda(), "residual_rmsnorm: expected CUDA tensors");
  auto xc = x.contiguous();
  auto rc = residual.contiguous();
  auto wc = weight.contiguous();
  const int64_t cols = wc.numel();
  const int64_t rows = xc.numel() / cols;
  TORCH_CHECK(xc.sizes() == rc.sizes() && xc.size(-1) == cols, "residual_rmsnorm: bad shapes");
  auto y = torch::empty_like(xc);
  if (rows > 0) {
    residual_rmsnorm_kernel<<<(unsigned)rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor residual_rmsnorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight);
"""

ext = load_inline(
    name="dice_builtin_030_residual_rmsnorm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['residual_rmsnorm_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x, residual):
        return ext.residual_rmsnorm_forward(x, residual, self.weight)
