"""Honest CPU solution for builtin task 034_attention_head: plain C++ loops, built with load_inline (C++ only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

// act: 0 none, 1 relu, 2 gelu (erf), 3 sigmoid
static inline float apply_act(float v, int act) {
  if (act == 1) return v > 0.f ? v : 0.f;
  if (act == 2) return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
  if (act == 3) return 1.f / (1.f + std::exp(-v));
  return v;
}

// C[b] = act(A[b] @ op(B[b]) + bias) * alpha + beta * R[b], row-major; op(B) = B ([K,N]) or B^T (B is [N,K]).
static void gemm(const float* A, const float* B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K,
                 int64_t sA, int64_t sB, int64_t sC, bool trans_b, const float* bias, int act, float alpha,
                 const float* R, float beta) {
  std::vector<float> acc(N);
  for (int64_t b = 0; b < batch; ++b) {
    const float* Ab = A + b * sA;
    const float* Bb = B + b * sB;
    float* Cb = C + b * sC;
    for (int64_t i = 0; i < M; ++i) {
      std::fill(acc.begin(), acc.end(), 0.f);
      if (trans_b) {
        for (int64_t j = 0; j < N; ++j) {
          float s = 0.f;
          for (int64_t k = 0; k < K; ++k) s += Ab[i * K + k] * Bb[j * K + k];
          acc[j] = s;
        }
      } else {
        for (int64_t k = 0; k < K; ++k) {
          const float a = Ab[i * K + k];
          for (int64_t j = 0; j < N; ++j) acc[j] += a * Bb[k * N + j];
        }
      }
      for (int64_t j = 0; j < N; ++j) {
        float v = acc[j] + (bias ? bias[j] : 0.f);
        v = apply_act(v, act) * alpha;
        if (R) v += beta * R[b * sC + i * N + j];
        Cb[i * N + j] = v;
      }
    }
  }
}

// ctx[b, i] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(Hd)) v_j
static void causal_attention(const float* q, const float* k, const float* v, float* ctx, int64_t B, int64_t T, int64_t Hd) {
  const float scale = 1.f / std::sqrt(static_cast<float>(Hd));
  std::vector<float> p(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T; ++i) {
      const float* qi = q + (b * T + i) * Hd;
      float m = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        const float* kj = k + (b * T + j) * Hd;
        float s = 0.f;
        for (int64_t d = 0; d < Hd; ++d) s += qi[d] * kj[d];
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      double z = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(p[j] - m);
        z += p[j];
      }
      float* out = ctx + (b * T + i) * Hd;
      for (int64_t d = 0; d < Hd; ++d) out[d] = 0.f;
      for (int64_t j = 0; j <= i; ++j) {
        const float w = static_cast<float>(p[j] / z);
        const float* vj = v + (b * T + j) * Hd;
        for (int64_t d = 0; d < Hd; ++d) out[d] += w * vj[d];
      }
    }
  }
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

ext = load_inline(
    name="dice_builtin_034_attention_head_cpu",
    cpp_sources=cpp_source,
    functions=['attention_forward'],
    extra_cflags=["-O2"],
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
