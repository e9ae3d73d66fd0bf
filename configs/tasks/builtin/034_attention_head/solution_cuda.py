"""Honest CUDA solution for builtin task 034_attention_head: real __global__ kernels built with load_inline."""
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

// One block per (query row i, batch b); scores for keys 0..i live in dynamic shared memory.
__global__ void causal_attention_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                        float* __restrict__ ctx, int64_t T, int64_t Hd, float scale) {
  extern __shared__ float scores[];
  __shared__ float smem[kThreads];
  const int64_t i = blockIdx.x, b = blockIdx.y;
  const float* qi = q + (b * T + i) * Hd;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    const float* kj = k + (b * T + j) * Hd;
    float s = 0.f;
    for (int64_t d = 0; d < Hd; ++d) s += qi[d] * kj[d];
    scores[j] = s * scale;
    m = fmaxf(m, scores[j]);
  }
  m = block_max(m, smem);
  float z = 0.f;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    scores[j] = expf(scores[j] - m);
    z += scores[j];
  }
  z = block_sum(z, smem);  // also a barrier: all scores are written
  const float inv = 1.f / z;
  for (int64_t d = threadIdx.x; d < Hd; d += kThreads) {
    float acc = 0.f;
    for (int64_t j = 0; j <= i; ++j) acc += scores[j] * v[(b * T + j) * Hd + d];
    ctx[(b * T + i) * Hd + d] = acc * inv;
  }
}

static void causal_attention(const float* q, const float* k, const float* v, float* ctx, int64_t B, int64_t T, int64_t Hd) {
  if (B == 0 || T == 0) return;
  const float scale = 1.f / sqrtf((float)Hd);
  dim3 grid((unsigned)T, (unsigned)B);
  const size_t shared_bytes = (size_t)T * sizeof(float);
  TORCH_CHECK(shared_bytes <= 48 * 1024, "attention: sequence too long for this kernel");
  causal_attention_kernel<<<grid, kThreads, shared_bytes, at::cuda::getCurrentCUDAStream()>>>(q, k, v, ctx, T, Hd, scale);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor attention_forward(torch::Tensor x, torch::Tensor wq, torch::Tensor wk, torch::Tensor wv, torch::Tensor wo) {
  auto xc = x.contiguous();
  auto wqc = wq.contiguous();
  auto wkc = wk.contiguous();
  auto wvc = wv.contiguous();
  auto woc = wo.contiguous();
  TORCH_CHECK(xc.dim() == 3, "attention: expected x of shape [B, T, D]");
  const int64_t B = xc.size(0), T = xc.size(1), Dm = xc.size(2), Hd = wqc.size(0);
  TORCH_CHECK(wqc.size(1) == Dm && wkc.sizes() == wqc.sizes() && wvc.sizes() == wqc.sizes() && woc.size(1) == Hd,
              "attention: bad shapes");
  auto opts = xc.options();
  auto q = torch::empty({B * T, Hd}, opts);
  auto k = torch::empty({B * T, Hd}, opts);
  auto v = torch::empty({B * T, Hd}, opts);
  gemm(xc.data_ptr<float>(), wqc.data_ptr<float>(), q.data_ptr<float>(), 1, B * T, Hd, Dm, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  gemm(xc.data_ptr<float>(), wkc.data_ptr<float>(), k.data_ptr<float>(), 1, B * T, Hd, Dm, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  gemm(xc.data_ptr<float>(), wvc.data_ptr<float>(), v.data_ptr<float>(), 1, B * T, Hd, Dm, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  auto ctx = torch::empty({B * T, Hd}, opts);
  causal_attention(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), ctx.data_ptr<float>(), B, T, Hd);
  auto y = torch::empty({B, T, Dm}, opts);
  gemm(ctx.data_ptr<float>(), woc.data_ptr<float>(), y.data_ptr<float>(), 1, B * T, Dm, Hd, 0, 0, 0, true, nullptr, 0, 1.f, nullptr, 0.f);
  return y;
}
"""

cpp_source = r"""
torch::Tensor attention_forward(torch::Tensor x, torch::Tensor wq, torch::Tensor wk, torch::Tensor wv, torch::Tensor wo);
"""

ext = load_inline(
    name="dice_builtin_034_attention_head_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['attention_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.q = nn.Linear(dim, head_dim, bias=False)
        self.k = nn.Linear(dim, head_dim, bias=False)
        self.v = nn.Linear(dim, head_dim, bias=False)
        self.o = nn.Linear(head_dim, dim, bias=False)

    def forward(self, x):
        return ext.attention_forward(x, self.q.weight, self.k.weight, self.v.weight, self.o.weight)
