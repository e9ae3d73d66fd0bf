"""Honest CPU solution for builtin task 029_linear_sigmoid_sum: plain C++ loops, built with load_inline (C++ only)."""
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

torch::Tensor linear_sigmoid_sum_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K, "linear_sigmoid_sum: bad shapes");
  auto h = torch::empty({M, N}, xc.options());
  gemm(xc.data_ptr<float>(), wc.data_ptr<float>(), h.data_ptr<float>(), 1, M, N, K, 0, 0, 0, true, bc.data_ptr<float>(),
       3, 1.f, nullptr, 0.f);
  auto y = torch::empty({M, 1}, xc.options());
  const float* hp = h.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < M; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < N; ++j) s += hp[i * N + j];
    yp[i] = static_cast<float>(s);
  }
  return y;
}
"""

ext = load_inline(
    name="dice_builtin_029_linear_sigmoid_sum_cpu",
    cpp_sources=cpp_source,
    functions=['linear_sigmoid_sum_forward'],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.linear_sigmoid_sum_forward(x, self.linear.weight, self.linear.bias)
