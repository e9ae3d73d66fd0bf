#pragma once
// Attention masks of block diffusion (SDAR training, TraceRL rows, block-diffusion decoding).
//
// Every mask is a bool tensor [B, 1, Lq, Lk] (broadcast over heads), true = the query may attend
// the key: the convention of torch's scaled_dot_product_attention. Masks are built by broadcasting
// comparisons of small per-token vectors (segment, block, noisy flag), never from N x N index
// tensors. `to_additive_mask` turns one into 0 / -inf floats (for HF transformers 4-D masks).
//
// The one rule behind all of them (q = query token, k = key token, same segment, k valid):
//   clean q in block b -> clean k in blocks <= b            (block-causal)
//   noisy q in block b -> noisy k in block b (same copy)    (bidirectional within the block)
//                         clean k in blocks <  b
//   noisy k is never visible to a clean q, nor to a noisy q of another block.
// and every token attends to itself (so a padding row is never empty).
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace dice::model {

// Per-token description of one side (queries or keys) of an attention.
struct TokenLayout {
  torch::Tensor segment;  // int64 [B, L]: tokens attend only within their segment; < 0 = padding
                          // (a padding key is never attended; a padding query attends itself)
  torch::Tensor block;    // int64 [B, L]: block index (may be negative, e.g. prompt blocks in TraceRL)
  torch::Tensor noisy;    // bool [B, L]: token belongs to a noisy (masked) copy
  torch::Tensor copy;     // optional int64 [B, L]: which noisy copy a noisy token belongs to, when
                          // a row holds several copies of one block (TraceRL packed rows); a noisy
                          // query sees only noisy keys of its own block AND copy (undefined: one copy)
};

// The rule above; when `self_attend` the diagonal (q index == k index, needs Lq == Lk) is forced
// on. Returns bool [B, 1, Lq, Lk].
torch::Tensor block_diffusion_mask(const TokenLayout& q, const TokenLayout& k, bool self_attend = true);

// The rule above without an N x N mask: block_diffusion_mask(lay, lay, true) in block-sparse
// form, for attention over long rows (TraceRL packed rows). The valid tokens of each row are split
// into chunks of consecutive blocks (about chunk_tokens clean tokens each); a chunk's queries are
// all its tokens (clean and noisy), its keys the clean tokens of its own and all earlier blocks
// plus its own noisy tokens, and its mask is the rule over just those queries and keys. Every key
// a query may attend is among its chunk's keys, so attention chunk by chunk equals the dense one.
// Padding queries (segment < 0) are in no chunk: their output is left 0 (nothing attends them).
struct SparseAttention {
  struct Chunk {
    torch::Tensor q_index, k_index;  // int64 [Q], [K] on the device: flat indices b * L + t
    torch::Tensor mask;              // bool [1, 1, Q, K] on the device
  };
  std::vector<Chunk> chunks;
  torch::Tensor q_index;   // int64 [sum Q] on the device: the chunks' q_index concatenated
  int64_t batch = 0, length = 0;
  int64_t pairs = 0;       // sum of Q * K over chunks (the attention's work)
  int64_t allowed = 0;     // query-key pairs the rule allows (the useful part of that work)
};
SparseAttention block_diffusion_plan(const TokenLayout& lay, int64_t chunk_tokens, torch::Device device);

// (a) SFT doubled sequence [noisy copy (n) | clean copy (n)] of packed examples.
//   segment_BN: int64 [B, n] example index per token of the (single) packed sequence, < 0 = padding.
//   positions_BN: int64 [B, n] absolute position within its example (prompt included); block =
//   position / block_size. Returns bool [B, 1, 2n, 2n]. Position ids of the doubled row are
//   cat(positions, positions).
torch::Tensor sft_mask(const torch::Tensor& segment_BN, const torch::Tensor& positions_BN, int64_t block_size);

// (b) TraceRL rows [prompt (L0) | clean response (L1) | noisy response (L1)] (recipe §4.6).
//   prompt_valid_BP: bool [B, L0], false for left padding. Prompt blocks are counted backwards
//   from the prompt end, response blocks from the response start. Returns bool [B, 1, T, T],
//   T = L0 + 2 L1.
torch::Tensor tracerl_mask(const torch::Tensor& prompt_valid_BP, int64_t response_len, int64_t block_size);
// Position ids for those rows: prompt pads get 0, valid prompt tokens 0.., the response continues
// after the prompt; the noisy copy repeats the clean positions. int64 [B, T].
torch::Tensor tracerl_positions(const torch::Tensor& prompt_valid_BP, int64_t response_len);

// (c) Block-causal (staircase) prefill of right-padded prompts at positions 0..L-1:
//   block = position / block_size; keys at positions >= lengths_B[b] are padding.
//   Returns bool [B, 1, L, L].
torch::Tensor prefill_mask(const torch::Tensor& lengths_B, int64_t seq_len, int64_t block_size);
// (c) Block decode against a KV cache: sequence b's query block sits at cache slots
//   lengths_B[b] .. lengths_B[b] + block_len - 1 and attends every slot < lengths_B[b] + block_len
//   (the committed cache plus the whole block, bidirectionally). kv_span = number of cache slots
//   the attention reads (>= max(lengths) + block_len). Returns bool [B, 1, block_len, kv_span].
torch::Tensor decode_mask(const torch::Tensor& lengths_B, int64_t block_len, int64_t kv_span);
// [B, 1, query_len, kv_span] bool: every query of row b attends slots [0, kv_lengths_B[b]) (the
// decode mask is this with kv_lengths = lengths + block_len).
torch::Tensor key_length_mask(const torch::Tensor& kv_lengths_B, int64_t query_len, int64_t kv_span);

// bool mask -> 0 where true, -inf where false, same shape.
torch::Tensor to_additive_mask(const torch::Tensor& mask, torch::Dtype dtype);

}  // namespace dice::model
