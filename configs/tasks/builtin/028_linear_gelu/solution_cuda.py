"""Honest CUDA solution for builtin task 028_linear_gelu: real __global__ kernels built with load_inline."""
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

constexpr int kTile = 16;

// act: 0 none, 1 relu, 2 gelu (erf), 3 sigmoid
__device__ __forceinline__ float apply_act(float v, int act) {
  if (act == 1) return v > 0.f ? v : 0.f;
  if (act == 2) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  if (act == 3) return 1.f / (1.f + expf(-v));
  return v;
}

// Shared-memory tiled GEMM, one output per thread, batch on blockIdx.z:
// C[b] = act(A[b] @ op(B[b]) + bias) * alpha + beta * R[b]; op(B) = B ([K,N]) or B^T (B is [N,K]).
template <bool kTransB>
__global__ void gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                            int M, int N, int K, int64_t sA, int64_t sB, int64_t sC,
                            const float* __restrict__ bias, int act, float alpha, const float* __restrict__ R, float beta) {
  __shared__ float As[kTile][kTile + 1];
  __shared__ float Bs[kTile][kTile + 1];
  A += blockIdx.z * sA;
  B += blockIdx.z * sB;
  C += blockIdx.z * sC;
  if (R) R += blockIdx.z * sC;
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    const int ak = k0 + threadIdx.x;
    As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[(int64_t)row * K + ak] : 0.f;
    if (kTransB) {
      // B is [N, K]: read along k (coalesced), store transposed so Bs[k][n] as in the plain case
      const int n = blockIdx.x * kTile + threadIdx.y;
      const int k = k0 + threadIdx.x;
      Bs[threadIdx.x][threadIdx.y] = (n < N && k < K) ? B[(int64_t)n * K + k] : 0.f;
    } else {
      const int k = k0 + threadIdx.y;
      Bs[threadIdx.y][threadIdx.x] = (k < K && col < N) ? B[(int64_t)k * N + col] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) {
    float v = acc + (bias ? bias[col] : 0.f);
    v = apply_act(v, act) * alpha;
    if (R) v += beta * R[(int64_t)row * N + col];
    C[(int64_t)row * N + col] = v;
  }
}

static void gemm(const float* A, const float* B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K,
                 int64_t sA, int64_t sB, int64_t sC, bool trans_b, const float* bias, int act, float alpha,
                 const float* R, float beta) {
  if (batch == 0 || M == 0 || N == 0) return;
  dim3 block(kTile, kTile);
  dim3 grid((unsigned)((N + kTile - 1) / kTile), (unsigned)((M + kTile - 1) / kTile), (unsigned)batch);
  auto stream = at::cuda::getCurrentCUDAStream();
  if (trans_b)
    gemm_kernel<true><<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)N, (int)K, sA, sB, sC, bias, act, alpha, R, beta);
  else
    gemm_kernel<false><<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)N, (int)K, sA, sB, sC, bias, act, alpha, R, beta);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  TORCH_CHECK(xc.dim() == 2 && wc.dim() == 2 && xc.size(1) == wc.size(1), "linear_gelu: bad shapes");
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  auto y = torch::empty({M, N}, xc.options());
  gemm(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), 1, M, N, K, 0, 0, 0, true,
       bc.data_ptr<float>(), 2, 1.f, nullptr, 0.f);
  return y;
}
"""

cpp_source = r"""
torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);
"""

ext = load_inline(
    name="dice_builtin_028_linear_gelu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['linear_gelu_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        # same parameter creation order as Model, so the seeded initialization matches
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.linear_gelu_forward(x, self.linear.weight, self.linear.bias)
