#pragma once
// Fused inference operators of the decoder (ForwardArgs::fused). On a CUDA tensor in a CUDA
// build each is one kernel of our own; elsewhere it is the same arithmetic as PyTorch ops, so CPU
// tests check the plumbing and the GPU bench checks the kernels against the unfused path.
// Inference only: none has a backward.
//
// Shape legend: B batch, L tokens per row, T = B*L, H hidden, D head_dim, F ffn.
#include <torch/types.h>

#include <cstdint>
#include <utility>

namespace dice::model::fused {

// The unfused references, PyTorch ops with autograd (the training path uses them):
// HF Qwen3RMSNorm of x [..., H] with weight w [H] (normalise in fp32, round, then scale) ...
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& w, double eps);
// ... and RoPE with the sign folded into sin: x * cos + [x2, x1] * [-sin1, sin2], which equals
// HF's x * cos + rotate_half(x) * sin bit for bit (negation is exact).
torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& signed_sin);

// True when this build has the CUDA kernels (else CUDA tensors take the PyTorch path too).
bool have_cuda_kernels();

// HF Qwen3RMSNorm of x [..., H] with weight w [H]: a new tensor.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);

// The residual add then the norm: x += delta in place (rounded as x + delta), returns
// rms_norm(x, w, eps). x must be contiguous.
torch::Tensor add_rms_norm_(torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, double eps);

// The attention's per-head work after the packed q|k|v projection qkv_BLN [B, L, (hq + 2 hkv) D]:
// q and k heads get RMSNorm over D (weights qw, kw) and RoPE (cos_BLD, signed sin_BLD: the first
// half negated); k and v are written into k_dst / v_dst [B, hkv, S, D] at slots_BL (int64, the
// cache slot of each token). Returns q [B, hq, L, D], contiguous.
torch::Tensor qk_norm_rope_scatter(const torch::Tensor& qkv_BLN, const torch::Tensor& qw, const torch::Tensor& kw,
                                   double eps, const torch::Tensor& cos_BLD, const torch::Tensor& sin_BLD,
                                   const torch::Tensor& slots_BL, torch::Tensor& k_dst, torch::Tensor& v_dst,
                                   int64_t hq, int64_t hkv);

// SwiGLU's middle of the packed gate|up projection gu [..., 2F]: silu(gate) * up -> [..., F].
torch::Tensor silu_mul(const torch::Tensor& gu);

// Attention of q_BHLD [B, Hq, L, D] over the first K slots of a KV cache k / v [B, Hkv, S, D],
// row b attending slots [0, kv_lengths_B[b]) (undefined: all K), softmax scale `scale`. Returns
// [B, L, Hq * D] (the o_proj input). On CUDA, for bf16 / fp16, D 64 or 128 and (Hq / Hkv) * L
// <= 16 (block decode), one tensor-core kernel (split over the keys when the batch is small);
// otherwise SDPA with the equivalent mask.
// Process-wide switch for benchmarks: false sends decode_attention to SDPA (default true).
void enable_decode_attention_kernel(bool on);
torch::Tensor decode_attention(const torch::Tensor& q_BHLD, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                               const torch::Tensor& kv_lengths_B, int64_t K, double scale);

// An inverse-CDF draw per row of logits_NV [N, V] (any float dtype) from softmax(logits / T)
// with uniform_N (double, in (0, 1)): the first index whose running mass exceeds u * total (as
// torch.searchsorted(cumsum, ..., right=True), clamped to V - 1). Returns tokens (int64 [N])
// and their probabilities (float [N]). On CUDA one kernel reads the logits in their own dtype.
std::pair<torch::Tensor, torch::Tensor> sample_rows(const torch::Tensor& logits_NV, const torch::Tensor& uniform_N,
                                                    double temperature);
// The same draw in PyTorch ops (softmax, cumsum, searchsorted) on any device; draw_tokens also
// uses it for top-k / top-p candidates.
std::pair<torch::Tensor, torch::Tensor> sample_rows_reference(const torch::Tensor& logits_NV,
                                                              const torch::Tensor& uniform_N, double temperature);

}  // namespace dice::model::fused
