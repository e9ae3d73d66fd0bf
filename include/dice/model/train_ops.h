#pragma once
// Fused operators of the learner's training forward (ForwardArgs::train_fused), each with a
// backward. On a CUDA bf16 / fp16 tensor in a CUDA build the forward is the inference kernel of
// fused_ops.h (so both round alike) and the backward a kernel of our own (fp32 arithmetic, fp32
// weight-gradient sums); elsewhere each is the composite PyTorch ops of the unfused forward, so
// the CPU tests check the plumbing in fp32 and `dice bench learner --grad-check` checks the
// kernels against the composite ops on the GPU.
//
// Shape legend: B batch, L tokens per row, H hidden, D head_dim, F ffn.
#include <torch/types.h>

#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <vector>

namespace dice::model::train {

// True when x takes the kernels (a CUDA build, a CUDA bf16 / fp16 tensor).
bool on_kernels(const torch::Tensor& x);

// HF Qwen3RMSNorm of x [..., H] with weight w [H] (fused::rms_norm_reference's numbers).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);

// After the packed q|k|v projection qkv_BLN [B, L, (hq + 2 hkv) D]: q and k get RMSNorm over D
// (weights qw, kw) and RoPE (cos_BLD, signed sin_BLD); returns q [B, hq, L, D], k and v
// [B, hkv, L, D].
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qk_norm_rope(const torch::Tensor& qkv_BLN,
                                                                     const torch::Tensor& qw, const torch::Tensor& kw,
                                                                     double eps, const torch::Tensor& cos_BLD,
                                                                     const torch::Tensor& sin_BLD, int64_t hq,
                                                                     int64_t hkv);

// silu(gate) * up of the packed gate|up projection gu [..., 2F] -> [..., F].
torch::Tensor silu_mul(const torch::Tensor& gu);

// src [A, N, C] gathered along dim 1 at each of `indices` (int64 [n_i] each): one output
// [A, n_i, C] per index, as index_select would give. The backward adds every output's gradient
// into one buffer (fp32 for reduced-precision src) with index_add_, instead of a zero-filled
// full-size gradient per gather that autograd then sums (the sparse plan gathers each row's keys
// once per chunk).
std::vector<torch::Tensor> gather_rows(const torch::Tensor& src, const std::vector<torch::Tensor>& indices);

// x [..., H] times the concatenated weights: one GEMM with `packed` [sum N_i, H], whose rows
// are the parameters `parts` (2 or 3 of them, [N_i, H] each, in order). The backward computes the
// packed weight gradient in one GEMM and hands each part its rows.
torch::Tensor packed_linear(const torch::Tensor& x, const torch::Tensor& packed,
                            std::initializer_list<torch::Tensor> parts);

}  // namespace dice::model::train
