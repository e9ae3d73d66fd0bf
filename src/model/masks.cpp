// Block-diffusion attention masks from per-token vectors (segment, block, noisy) by broadcasting.
//
// Shape legend: B batch, L/n tokens, P prompt tokens, R response tokens, Q queries, K keys.
#include "dice/model/masks.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "dice/util/error.h"

namespace dice::model {
namespace {

void check_layout(const TokenLayout& t, const char* side) {
  DICE_REQUIRE(t.segment.defined() && t.block.defined() && t.noisy.defined(), "The ", side,
               " token layout needs segment, block and noisy tensors.");
  DICE_REQUIRE(t.segment.dim() == 2 && t.segment.sizes() == t.block.sizes() && t.segment.sizes() == t.noisy.sizes(),
               "The ", side, " token layout tensors must all be [B, L]; got segment ", t.segment.sizes(), ", block ",
               t.block.sizes(), ", noisy ", t.noisy.sizes(), ".");
}

}  // namespace

torch::Tensor block_diffusion_mask(const TokenLayout& q, const TokenLayout& k, bool self_attend) {
  check_layout(q, "query");
  check_layout(k, "key");
  DICE_REQUIRE(q.segment.size(0) == k.segment.size(0), "Query and key layouts disagree on the batch size (",
               q.segment.size(0), " vs ", k.segment.size(0), ").");
  auto qs = q.segment.unsqueeze(2), ks = k.segment.unsqueeze(1);  // [B, Q, 1], [B, 1, K]
  auto qb = q.block.unsqueeze(2), kb = k.block.unsqueeze(1);
  auto qn = q.noisy.to(torch::kBool).unsqueeze(2), kn = k.noisy.to(torch::kBool).unsqueeze(1);
  auto same_noisy = kb == qb;
  if (q.copy.defined() || k.copy.defined()) {
    DICE_REQUIRE(q.copy.defined() && k.copy.defined() && q.copy.sizes() == q.segment.sizes() &&
                     k.copy.sizes() == k.segment.sizes(),
                 "Both token layouts need a copy tensor of shape [B, L] when one has it.");
    same_noisy = same_noisy.logical_and(q.copy.unsqueeze(2) == k.copy.unsqueeze(1));
  }
  auto visible = torch::where(qn,
                              torch::where(kn, same_noisy, kb < qb),  // noisy q
                              kn.logical_not().logical_and(kb <= qb));  // clean q
  auto m = visible.logical_and(qs == ks).logical_and(ks >= 0);  // [B, Q, K]
  if (self_attend) {
    DICE_REQUIRE(q.segment.size(1) == k.segment.size(1), "self_attend needs as many queries as keys (",
                 q.segment.size(1), " vs ", k.segment.size(1), ").");
    const int64_t L = q.segment.size(1);
    auto idx = torch::arange(L, q.segment.options().dtype(torch::kInt64));
    m = m.logical_or((idx.unsqueeze(1) == idx.unsqueeze(0)).unsqueeze(0));
  }
  return m.unsqueeze(1);
}

SparseAttention block_diffusion_plan(const TokenLayout& lay, int64_t chunk_tokens, torch::Device device) {
  check_layout(lay, "token");
  DICE_REQUIRE(chunk_tokens > 0, "The sparse attention chunk must hold at least one token, got ", chunk_tokens, ".");
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto seg = lay.segment.to(torch::kCPU, torch::kInt64).contiguous();
  auto blk = lay.block.to(torch::kCPU, torch::kInt64).contiguous();
  auto noisy = lay.noisy.to(torch::kCPU, torch::kBool).contiguous();
  auto cpy = lay.copy.defined() ? lay.copy.to(torch::kCPU, torch::kInt64).contiguous() : torch::Tensor();
  const int64_t B = seg.size(0), L = seg.size(1);
  auto sa = seg.accessor<int64_t, 2>(), ba = blk.accessor<int64_t, 2>();
  auto na = noisy.accessor<bool, 2>();
  SparseAttention out;
  out.batch = B;
  out.length = L;
  std::vector<torch::Tensor> q_all;
  for (int64_t b = 0; b < B; ++b) {
    // Valid tokens by block (stable: token order within a block).
    std::vector<int64_t> tok;
    for (int64_t t = 0; t < L; ++t)
      if (sa[b][t] >= 0) tok.push_back(t);
    std::stable_sort(tok.begin(), tok.end(), [&](int64_t x, int64_t y) { return ba[b][x] < ba[b][y]; });
    std::vector<int64_t> clean_sorted;  // clean tokens by block: a chunk's keys are a prefix of it
    for (auto t : tok)
      if (!na[b][t]) clean_sorted.push_back(t);
    size_t i = 0, clean_end = 0;
    while (i < tok.size()) {
      // Blocks [lo, hi]: whole blocks until the chunk holds chunk_tokens clean tokens.
      const int64_t lo = ba[b][tok[i]];
      size_t j = i;
      int64_t clean = 0, hi = lo;
      while (j < tok.size() && (clean < chunk_tokens || ba[b][tok[j]] == hi)) {
        hi = ba[b][tok[j]];
        clean += na[b][tok[j]] ? 0 : 1;
        ++j;
      }
      std::vector<int64_t> q(tok.begin() + static_cast<long>(i), tok.begin() + static_cast<long>(j)), k;
      while (clean_end < clean_sorted.size() && ba[b][clean_sorted[clean_end]] <= hi) ++clean_end;
      k.assign(clean_sorted.begin(), clean_sorted.begin() + static_cast<long>(clean_end));
      for (auto t : q)
        if (na[b][t]) k.push_back(t);
      auto qi = torch::tensor(q, i64), ki = torch::tensor(k, i64);
      auto side = [&](const torch::Tensor& idx) {
        TokenLayout s{seg[b].index_select(0, idx).unsqueeze(0), blk[b].index_select(0, idx).unsqueeze(0),
                      noisy[b].index_select(0, idx).unsqueeze(0),
                      cpy.defined() ? cpy[b].index_select(0, idx).unsqueeze(0) : torch::Tensor()};
        return s;
      };
      auto mask = block_diffusion_mask(side(qi), side(ki), /*self_attend=*/false);
      out.pairs += qi.size(0) * ki.size(0);
      out.allowed += mask.sum().item<int64_t>();
      SparseAttention::Chunk c;
      c.q_index = (qi + b * L).to(device);
      c.k_index = (ki + b * L).to(device);
      c.mask = mask.to(device);
      q_all.push_back(c.q_index);
      out.chunks.push_back(std::move(c));
      i = j;
    }
  }
  out.q_index = q_all.empty() ? torch::zeros({0}, i64.device(device)) : torch::cat(q_all, 0);
  return out;
}

torch::Tensor sft_mask(const torch::Tensor& segment_BN, const torch::Tensor& positions_BN, int64_t block_size) {
  DICE_REQUIRE(block_size > 0, "block_size must be positive, got ", block_size, ".");
  DICE_REQUIRE(segment_BN.dim() == 2 && segment_BN.sizes() == positions_BN.sizes(),
               "sft_mask needs segment and positions of the same shape [B, n]; got ", segment_BN.sizes(), " and ",
               positions_BN.sizes(), ".");
  auto seg = segment_BN.to(torch::kInt64), blk = torch::div(positions_BN.to(torch::kInt64), block_size, "floor");
  auto noisy = torch::ones_like(seg, seg.options().dtype(torch::kBool));
  TokenLayout t{torch::cat({seg, seg}, 1), torch::cat({blk, blk}, 1), torch::cat({noisy, noisy.logical_not()}, 1), torch::Tensor()};
  return block_diffusion_mask(t, t, true);
}

namespace {

// Per-token layout of TraceRL rows [prompt | clean | noisy]: prompt blocks counted backwards from
// the prompt end (-1 is the last prompt block), response blocks from the response start.
TokenLayout tracerl_layout(const torch::Tensor& prompt_valid_BP, int64_t R, int64_t block_size) {
  DICE_REQUIRE(block_size > 0, "block_size must be positive, got ", block_size, ".");
  DICE_REQUIRE(prompt_valid_BP.dim() == 2, "TraceRL prompt_valid must be [B, L0], got ", prompt_valid_BP.sizes(), ".");
  DICE_REQUIRE(R >= 0, "TraceRL response length must be >= 0, got ", R, ".");
  auto valid = prompt_valid_BP.to(torch::kBool);
  const int64_t B = valid.size(0), P = valid.size(1);
  auto i64 = valid.options().dtype(torch::kInt64);
  auto from_end = torch::arange(P, i64) - P;                                   // -P .. -1
  auto p_block = torch::div(from_end, block_size, "floor").expand({B, P});      // -1 = last block
  auto r_block = torch::div(torch::arange(R, i64), block_size, "floor").expand({B, R});
  auto p_seg = torch::where(valid, torch::zeros({B, P}, i64), torch::full({B, P}, -1, i64));
  auto r_seg = torch::zeros({B, R}, i64);
  auto f = torch::zeros({B, P + R}, valid.options());
  auto t = torch::ones({B, R}, valid.options());
  return {torch::cat({p_seg, r_seg, r_seg}, 1), torch::cat({p_block, r_block, r_block}, 1), torch::cat({f, t}, 1), torch::Tensor()};
}

}  // namespace

torch::Tensor tracerl_mask(const torch::Tensor& prompt_valid_BP, int64_t response_len, int64_t block_size) {
  TokenLayout t = tracerl_layout(prompt_valid_BP, response_len, block_size);
  return block_diffusion_mask(t, t, true);
}

torch::Tensor tracerl_positions(const torch::Tensor& prompt_valid_BP, int64_t response_len) {
  DICE_REQUIRE(prompt_valid_BP.dim() == 2, "TraceRL prompt_valid must be [B, L0], got ", prompt_valid_BP.sizes(), ".");
  auto valid = prompt_valid_BP.to(torch::kInt64);
  auto n_valid = valid.sum(1, /*keepdim=*/true);                          // [B, 1]
  auto p_pos = (valid.cumsum(1) - 1).clamp_min(0).mul(valid);             // pads -> 0
  auto r_pos = n_valid + torch::arange(response_len, valid.options()).unsqueeze(0);
  return torch::cat({p_pos, r_pos, r_pos}, 1);
}

torch::Tensor prefill_mask(const torch::Tensor& lengths_B, int64_t seq_len, int64_t block_size) {
  DICE_REQUIRE(block_size > 0, "block_size must be positive, got ", block_size, ".");
  DICE_REQUIRE(lengths_B.dim() == 1, "prefill_mask needs lengths [B], got ", lengths_B.sizes(), ".");
  const int64_t B = lengths_B.size(0);
  auto i64 = lengths_B.options().dtype(torch::kInt64);
  auto pos = torch::arange(seq_len, i64).unsqueeze(0).expand({B, seq_len});
  auto seg = torch::where(pos < lengths_B.to(torch::kInt64).unsqueeze(1), torch::zeros({B, seq_len}, i64),
                          torch::full({B, seq_len}, -1, i64));
  auto blk = torch::div(pos, block_size, "floor");
  TokenLayout t{seg, blk, torch::zeros({B, seq_len}, lengths_B.options().dtype(torch::kBool)), torch::Tensor()};
  return block_diffusion_mask(t, t, true);
}

torch::Tensor decode_mask(const torch::Tensor& lengths_B, int64_t block_len, int64_t kv_span) {
  DICE_REQUIRE(lengths_B.dim() == 1, "decode_mask needs lengths [B], got ", lengths_B.sizes(), ".");
  DICE_REQUIRE(block_len > 0 && kv_span >= block_len, "decode_mask needs 0 < block_len <= kv_span; got block_len ",
               block_len, ", kv_span ", kv_span, ".");
  return key_length_mask(lengths_B.to(torch::kInt64) + block_len, block_len, kv_span);
}

torch::Tensor key_length_mask(const torch::Tensor& kv_lengths_B, int64_t query_len, int64_t kv_span) {
  DICE_REQUIRE(kv_lengths_B.dim() == 1, "key_length_mask needs lengths [B], got ", kv_lengths_B.sizes(), ".");
  const int64_t B = kv_lengths_B.size(0);
  auto end = kv_lengths_B.to(torch::kInt64).view({B, 1, 1, 1});
  auto k = torch::arange(kv_span, kv_lengths_B.options().dtype(torch::kInt64)).view({1, 1, 1, kv_span});
  return (k < end).expand({B, 1, query_len, kv_span});
}

torch::Tensor to_additive_mask(const torch::Tensor& mask, torch::Dtype dtype) {
  auto zeros = torch::zeros({}, mask.options().dtype(dtype));
  auto low = torch::full({}, -std::numeric_limits<double>::infinity(), mask.options().dtype(dtype));
  return torch::where(mask.to(torch::kBool), zeros, low);
}

}  // namespace dice::model
