#pragma once
// Launchers of the learner's backward kernels (train_kernels.cu); the forwards reuse the
// inference kernels (fused_kernels.h), so both paths round alike. Raw pointers and sizes only
// (no LibTorch header for nvcc); train_ops.cpp checks shapes and dtypes. bf16 / fp16 data
// (`dtype` 1 / 2), fp32 arithmetic and fp32 partial sums. Each launcher enqueues on `stream` and
// returns cudaGetLastError() as an int.
#include <cstdint>

namespace dice::model::train::cuda {

// Warps the partial weight-gradient sums are split over (rows [warps, H] of `dw_part`).
int norm_backward_warps(int64_t rows, int sms);

// Backward of y = w * round(x * r), r = rsqrt(mean(x^2) + eps), over rows x [T, H] (contiguous):
// dx [T, H] from dy [T, H]; dw_part [warps, H] fp32 gets each warp's sum of dy * round(x * r)
// (the caller sums it over warps). H a multiple of 8 and at most 4096.
int rms_norm_backward(int dtype, const void* x, const void* w, const void* dy, float eps, void* dx, float* dw_part,
                      int64_t T, int64_t H, int warps, void* stream);

// Backward of the attention's q/k norm + RoPE + split (fused::qk_norm_rope_scatter with slots
// 0..L-1 into fresh buffers): qkv [B*L, (hq + 2 hkv) D] the saved projection; dq [B, hq, L, D],
// dk / dv [B, hkv, L, D] contiguous; cos / sin [B*L, D] as in the forward. Writes dqkv [B*L, N]
// and dw_part [warps, 2, D] fp32 (q_norm then k_norm weight partial sums). D = 128 or 64.
int qk_norm_rope_backward(int dtype, const void* qkv, const void* qw, const void* kw, float eps, const void* cos,
                          const void* sin, const void* dq, const void* dk, const void* dv, void* dqkv, float* dw_part,
                          int64_t B, int64_t L, int64_t hq, int64_t hkv, int64_t D, int warps, void* stream);

// Backward of out = round(round(silu(g)) * u) with gu = [g | u] rows [T, 2F] (contiguous):
// dgu [T, 2F] from dout [T, F]. F a multiple of 8.
int silu_mul_backward(int dtype, const void* gu, const void* dout, void* dgu, int64_t T, int64_t F, void* stream);

}  // namespace dice::model::train::cuda
