"""Honest CUDA solution for builtin task 022_matvec: real __global__ kernels built with load_inline."""
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

// One block per row of A: threads stride over K, then a block reduction.
__global__ void matvec_kernel(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y, int64_t K) {
  __shared__ float smem[kThreads];
  const float* row = A + blockIdx.x * K;
  float s = 0.f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) s += row[k] * x[k];
  s = block_sum(s, smem);
  if (threadIdx.x == 0) y[blockIdx.x] = s;
}

torch::Tensor matvec_forward(torch::Tensor A, torch::Tensor x) {
  TORCH_CHECK(A.is_cuda() && x.is_cuda() && A.dim() == 2, "matvec: expected CUDA tensors");
  auto Ac = A.contiguous();
  auto xc = x.contiguous();
  const int64_t M = Ac.size(0), K = Ac.size(1);
  TORCH_CHECK(xc.numel() == K, "matvec: vector length does not match");
  auto y = torch::empty({M, 1}, Ac.options());
  if (M > 0) {
    matvec_kernel<<<(unsigned)M, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(Ac.data_ptr<float>(), xc.data_ptr<float>(),
                                                                               y.data_ptr<float>(), K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor matvec_forward(torch::Tensor A, torch::Tensor x);
"""

ext = load_inline(
    name="dice_builtin_022_matvec_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['matvec_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return ext.matvec_forward(A, x)
