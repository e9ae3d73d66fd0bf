#pragma once
// KV cache for block-diffusion generation.
//
// Contract (for the sampler):
//  - The caller allocates one KVCache per batch of sequences: KVCache(cfg, batch, max_len, dtype,
//    device). It holds, per layer, K and V tensors [B, kv_heads, max_len, head_dim], allocated
//    once; nothing is allocated afterwards (forwards write into it in place).
//  - Slot = absolute position: the token at position p of sequence b has its K/V at slot p of
//    row b. Positions are per sequence (a batch of different-length prompts is right-padded, never
//    left-padded), and every position fed to a forward must be < max_len.
//  - A forward given the cache (Transformer::forward with ForwardArgs::cache) first writes the
//    new tokens' K/V at slots `positions`, then attends over slots [0, kv_span) with the given
//    mask. Writing is harmless for tokens that are not final: their slots lie beyond the committed
//    length and are overwritten by the next forward at those positions.
//  - lengths() (int64 [B], on the cache's device) is the number of committed slots per sequence.
//    Only the caller advances it: after prefilling the full prompt blocks, set_lengths(full_len);
//    after the final forward of a decoded block (the "commit" forward, which writes the final
//    tokens' K/V), advance(block_len) (or advance(n_B) for per-sequence steps, e.g. 0 for finished
//    sequences).
//  - Typical loop (block size 4):
//      prefill: ids [B, Lp] (full blocks, right-padded), positions 0..Lp-1,
//               mask prefill_mask(full_len_B, Lp, 4), kv_span = Lp; then set_lengths(full_len_B)
//      decode step: ids [B, 4], positions lengths + 0..3, mask decode_mask(lengths, 4, span),
//               span = max(lengths) + 4 (from the host; round it up to reduce shape variety)
//      commit: the same forward with the final tokens (logits_at empty), then advance(4).
//  - rows(first, count) is a KVCache over a slice of the batch rows that shares this one's memory
//    (K/V and lengths are views, nothing is copied or allocated): run a forward on a subset of the
//    sequences (e.g. the active prefix after compaction) against the big cache.
//  - reset() sets the lengths to 0 and keeps the memory (reuse for the next batch of the same
//    shape); release() frees the memory (the object is then unusable until reallocated);
//    destroying the object frees it too.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "dice/model/config.h"

namespace dice::model {

class KVCache {
 public:
  KVCache(const ModelConfig& cfg, int64_t batch, int64_t max_len, torch::Dtype dtype, torch::Device device);

  int64_t batch() const { return batch_; }
  int64_t max_len() const { return max_len_; }
  int64_t num_layers() const { return static_cast<int64_t>(k_.size()); }
  bool allocated() const { return !k_.empty(); }

  // [B, kv_heads, max_len, head_dim] of one layer.
  torch::Tensor& k(int64_t layer);
  torch::Tensor& v(int64_t layer);

  const torch::Tensor& lengths() const { return lengths_; }
  void set_lengths(const torch::Tensor& lengths_B);  // copied in place
  void advance(int64_t n);                           // every sequence
  void advance(const torch::Tensor& n_B);            // per sequence
  void reset();
  void release();
  int64_t bytes() const;

  // Rows [first, first + count) as a cache sharing this one's memory (see the contract above).
  KVCache rows(int64_t first, int64_t count);

  // Writes k/v [B, kv_heads, L, head_dim] of `layer` at slots positions_BL (int64 [B, L]).
  void write(int64_t layer, const torch::Tensor& k_BHLD, const torch::Tensor& v_BHLD, const torch::Tensor& positions_BL);

 private:
  KVCache() = default;
  int64_t batch_ = 0;
  int64_t max_len_ = 0;
  std::vector<torch::Tensor> k_, v_;
  torch::Tensor lengths_;
};

}  // namespace dice::model
