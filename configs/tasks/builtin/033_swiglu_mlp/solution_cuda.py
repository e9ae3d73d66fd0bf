"""Honest CUDA solution for builtin task 033_swiglu_mlp: real __global__ kernels built with load_inline."""
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

__global__ void silu_mul_kernel(float* __restrict__ g, const float* __restrict__ u, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = g[i];
    g[i] = v / (1.f + expf(-v)) * u[i];
  }
}

static void silu_mul(float* g, const float* u, int64_t n) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535 * 8);
  silu_mul_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(g, u, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor swiglu_forward(torch::Tensor x, torch::Tensor wg, torch::Tensor wu, torch::Tensor wd) {
  auto xc = x.contiguous();
  auto wgc = wg.contiguous();
  auto wuc = wu.contiguous();
  auto wdc = wd.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), H = wgc.size(0), N = wdc.size(0);
  TORCH_CHECK(wgc.size(1) == K && wuc.size(0) == H && wuc.size(1) == K && wdc.size(1) == H, "swiglu: bad shapes");
  auto g = torch::empty({M, H}, xc.options());
  auto u = torch::empty({M, H}, xc.options());
  gemm(xc.data_ptr<float>(), wgc.data_ptr<float>(), g.data_ptr<float>(), 1, M, H, K, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  gemm(xc.data_ptr<float>(), wuc.data_ptr<float>(), u.data_ptr<float>(), 1, M, H, K, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  silu_mul(g.data_ptr<float>(), u.data_ptr<float>(), M * H);  // g <- silu(g) * u
  auto y = torch::empty({M, N}, xc.options());
  gemm(g.data_ptr<float>(), wdc.data_ptr<float>(), y.data_ptr<float>(), 1, M, N, H, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  return y;
}
"""

cpp_source = r"""
torch::Tensor swiglu_forward(torch::Tensor x, torch::Tensor wg, torch::Tensor wu, torch::Tensor wd);
"""

ext = load_inline(
    name="dice_builtin_033_swiglu_mlp_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['swiglu_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        return ext.swiglu_forward(x, self.gate.weight, self.up.weight, self.down.weight)
