#pragma once
// The SDAR / Qwen3 decoder (a torch::nn::Module whose named_parameters() are the HF names).
//
// Embedding -> N x [RMSNorm -> GQA attention (q_norm/k_norm over head_dim, RoPE, SDPA with a
// boolean mask) -> residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> lm_head.
// Block-diffusion convention: the logit at position i predicts the token at position i (no shift).
// The caller chooses the attention pattern through the mask (see masks.h), so one forward serves
// SFT (doubled sequences), TraceRL rows, prefill and block decode (with a KVCache).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "dice/model/config.h"
#include "dice/model/kv_cache.h"
#include "dice/model/masks.h"
#include "dice/model/safetensors.h"

namespace dice::model {

struct ForwardArgs {
  torch::Tensor ids;        // int64 [B, L] token ids
  torch::Tensor positions;  // int64 [B, L] RoPE positions (and cache slots when `cache` is set)
  torch::Tensor mask;       // bool [B or 1, 1, L, K], true = attend; K = L without a cache,
                            // K = kv_span with one. Undefined = full bidirectional attention.
  KVCache* cache = nullptr; // optional: write the new K/V at `positions`, attend cache[:kv_span]
  int64_t kv_span = 0;
  torch::Tensor kv_lengths; // optional int64 [B], with a cache and instead of a mask: row b attends
                            // slots [0, kv_lengths[b]) (block decode; fused: one attention kernel)
  torch::Tensor logits_at;  // optional int64 [N]: flat indices into B*L; lm_head runs only there
  // Training rows without an N x N mask (instead of `mask`, no cache): attention chunk by chunk
  // over the block-sparse plan (masks.h), which the caller keeps alive until backward is done.
  const SparseAttention* sparse = nullptr;
  // Activation checkpointing (when grad mode is on, no cache) of the first `checkpoint` layers
  // (< 0: all): each keeps only its input and runs its forward again during backward.
  int64_t checkpoint = 0;
  // Inference only (needs torch::NoGradGuard): q|k|v and gate|up each as one GEMM over packed
  // weights, and the small operators as fused kernels (fused_ops.h): the residual add with the
  // next RMSNorm, q/k norm + RoPE + K/V write, SiLU * up, and block-decode attention over the
  // cache. HF's rounding points are kept; fp32 sums are reduced in another order, so an element
  // can differ by about an ulp (bf16 attention: as flash attention, P is rounded to bf16).
  bool fused = false;
  // Training forwards (the learner's fast path; no cache, not `fused`): q|k|v and gate|up each as
  // one GEMM over the packed weights (the weight gradient split back to the parameters), and
  // RMSNorm, q/k norm + RoPE and SiLU * up as operators with a backward (train_ops.h: our kernels
  // on CUDA bf16 / fp16, the composite PyTorch ops elsewhere).
  bool train_fused = false;
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);


class TransformerImpl : public torch::nn::Module {
 public:
  // Parameters are created on `device` in `dtype` (bf16 on GPU, fp32 on CPU), uninitialised
  // except norm weights (1); load real weights with load_weights.
  TransformerImpl(const ModelConfig& cfg, torch::Dtype dtype, torch::Device device);

  const ModelConfig& config() const { return cfg_; }
  torch::Dtype dtype() const { return dtype_; }
  torch::Device device() const { return device_; }

  // Copies every tensor into the parameter of the same HF name (cast to the model's dtype and
  // device). Missing, unexpected (a tied model ignores lm_head.weight equal in shape) or
  // mis-shaped tensors -> dice::Error listing them.
  void load_weights(const NamedTensors& weights);
  // Parameters by HF name (CPU copies in `dtype`), e.g. for save_hf_weights.
  NamedTensors state_dict(torch::Dtype dtype) const;

  // Final hidden states after the last norm: [B, L, hidden].
  torch::Tensor hidden(const ForwardArgs& args);
  // lm_head over hidden states [..., hidden] -> [..., vocab] (model dtype).
  torch::Tensor logits_from_hidden(const torch::Tensor& h);
  const torch::Tensor& lm_head_weight() const { return lm_head_weight_; }
  // Logits [B, L, vocab], or [N, vocab] at args.logits_at (model dtype).
  torch::Tensor forward(const ForwardArgs& args);

 private:
  ModelConfig cfg_;
  torch::Dtype dtype_;
  torch::Device device_;
  std::shared_ptr<torch::nn::Module> model_;  // the "model" submodule (embed_tokens, layers, norm)
  torch::Tensor embed_weight_;                // [vocab, hidden]
  torch::nn::ModuleList layers_{nullptr};
  RMSNorm norm_{nullptr};
  torch::Tensor lm_head_weight_;              // [vocab, hidden]; the embedding when tied
  torch::Tensor inv_freq_;                    // fp32 [head_dim / 2] on device
};
TORCH_MODULE(Transformer);

// Convenience: config + weights of an HF folder -> model (weights cast to dtype, moved to device).
Transformer load_hf_model(const std::string& dir, torch::Dtype dtype, torch::Device device);

}  // namespace dice::model
