"""Honest CUDA solution for builtin task 020_rmsnorm: real __global__ kernels built with load_inline."""
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

__global__ void rmsnorm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols, const float* __restrict__ weightp) {
  __shared__ float smem[kThreads];
  const float* row = x + blockIdx.x * cols;
  float* out = y + blockIdx.x * cols;

  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += row[c] * row[c];
  const float rstd = rsqrtf(block_sum(s, smem) / (float)cols + 1e-6f);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = row[c] * rstd * weightp[c];
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "rmsnorm: expected a 2-D CUDA tensor");
  auto xc = x.contiguous();
  auto weightc = weight.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty_like(xc);
  if (rows > 0) {
    rmsnorm_kernel<<<(unsigned)rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols, weightc.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight);
"""

ext = load_inline(
    name="dice_builtin_020_rmsnorm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['rmsnorm_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return ext.rmsnorm_forward(x, self.weight)
