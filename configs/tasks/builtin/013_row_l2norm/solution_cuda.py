"""Honest CUDA solution for builtin task 013_row_l2norm: real __global__ kernels built with load_inline."""
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

__global__ void row_l2norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float smem[kThreads];
  const float* row = x + blockIdx.x * cols;
  float acc = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = row[c];
    acc += v * v;
  }
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) y[blockIdx.x] = sqrtf(acc);
}

torch::Tensor row_l2norm_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "row_l2norm: expected a 2-D CUDA tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty({rows}, xc.options());
  if (rows > 0) {
    row_l2norm_kernel<<<(unsigned)rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor row_l2norm_forward(torch::Tensor x);
"""

ext = load_inline(
    name="dice_builtin_013_row_l2norm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['row_l2norm_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.row_l2norm_forward(x)
