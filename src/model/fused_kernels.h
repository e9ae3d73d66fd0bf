#pragma once
// Launchers of the fused inference kernels (fused_kernels.cu). Raw pointers and sizes only, so
// the .cu needs no LibTorch header and nvcc stays fast; fused_ops.cpp checks shapes and dtypes.
// All tensors are row-major with a contiguous last dimension. `dtype`: 0 fp32, 1 bf16, 2 fp16.
// Every launcher enqueues on `stream` (a cudaStream_t) and returns cudaGetLastError() as an int.
#include <cstdint>

namespace dice::model::fused::cuda {

// y[t] = w * round(x[t] * rsqrt(mean(x[t]^2) + eps)); with `delta`, first x[t] = round(x[t] + delta[t])
// in place (the residual add). x, delta, y: [T, H] with row strides; w: [H].
int rms_norm(int dtype, void* x, int64_t x_stride, const void* delta, int64_t delta_stride, const void* w, void* y,
             int64_t T, int64_t H, float eps, void* stream);

// qkv: [B*L, (hq + 2*hkv) * D] rows (row stride qkv_stride). Query heads: RMSNorm over D with
// qw, RoPE, written to q_out [B, hq, L, D] (contiguous). Key heads: RMSNorm with kw, RoPE,
// written to k_dst[b, h, slots[b, l], :]; value heads copied to v_dst the same way (strides in
// elements for the first three dimensions of k_dst / v_dst). cos / sin: [B*L, D] in dtype, sin
// with the first half negated (rotate_half folded in).
int qk_norm_rope_scatter(int dtype, const void* qkv, int64_t qkv_stride, const void* qw, const void* kw, float eps,
                         const void* cos, const void* sin, const int64_t* slots, void* q_out, void* k_dst,
                         const int64_t* k_strides, void* v_dst, const int64_t* v_strides, int64_t B, int64_t L,
                         int64_t hq, int64_t hkv, int64_t D, void* stream);

// out[t, i] = round(round(silu(gu[t, i])) * gu[t, F + i]); gu: [T, 2F] (row stride), out: [T, F].
int silu_mul(int dtype, const void* gu, int64_t gu_stride, void* out, int64_t T, int64_t F, void* stream);

// Per row n of logits [N, V] (row stride): token[n] drawn by inverse CDF from softmax(logits[n] /
// temperature) with uniform[n] (double, in (0, 1)), and prob[n] its probability.
int sample_rows(int dtype, const void* logits, int64_t stride, int64_t N, int64_t V, const double* uniform,
                float temperature, int64_t* token, float* prob, void* stream);

// Block-decode attention (bf16 / fp16, D 64 or 128, (Hq / Hkv) * L <= 16): q [B, Hq, L, D]
// contiguous; k / v [B, Hkv, S, D] (strides in elements for the first three dimensions); row b
// attends keys [0, kv_len[b]) (kv_len null: [0, k_all)); out [B, L, Hq, D]. With splits > 1 the
// keys are cut into that many pieces merged through part_o [splits, B, Hkv, 16, D] and part_ml
// [splits, B, Hkv, 16, 2] (fp32 scratch).
int decode_attention_splits(int64_t B, int64_t Hkv, int64_t K, int sms);
int decode_attention(int dtype, const void* q, const void* k, const int64_t* k_strides, const void* v,
                     const int64_t* v_strides, const int64_t* kv_len, int64_t k_all, int64_t B, int64_t Hq,
                     int64_t Hkv, int64_t L, int64_t D, float scale, int splits, void* out, float* part_o,
                     float* part_ml, void* stream);

}  // namespace dice::model::fused::cuda
