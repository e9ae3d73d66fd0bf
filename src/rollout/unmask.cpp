// Per-step core of block-diffusion decoding (see unmask.h).
#include "dice/rollout/unmask.h"

#include <torch/torch.h>

#include <limits>

#include "dice/model/fused_ops.h"
#include "dice/util/error.h"

namespace dice::rollout {

Strategy parse_strategy(const std::string& name) {
  if (name == "static" || name == "low_confidence_static") return Strategy::kStatic;
  if (name == "dynamic" || name == "low_confidence_dynamic") return Strategy::kDynamic;
  if (name == "sequential") return Strategy::kSequential;
  throw Error(str("unknown unmasking strategy '", name, "': use static, dynamic or sequential"));
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kStatic: return "static";
    case Strategy::kDynamic: return "dynamic";
    case Strategy::kSequential: return "sequential";
  }
  return "?";
}

// ---- noise -------------------------------------------------------------------------------------
// A 32-bit integer mixer (the "lowbias32" finalizer), written so that the tensor version only
// needs int64 products below 2^63: multiplication mod 2^32 by c = c_hi * 2^16 + c_lo is
// x * c_lo + ((x * c_hi) mod 2^16) * 2^16.
namespace {
constexpr uint64_t kM32 = 0xffffffffULL;
constexpr uint64_t kC1 = 0x7feb352dULL;
constexpr uint64_t kC2 = 0x846ca68bULL;

uint64_t mulmod32(uint64_t x, uint64_t c) { return (x * c) & kM32; }
uint64_t mix32(uint64_t x) {
  x &= kM32;
  x ^= x >> 16;
  x = mulmod32(x, kC1);
  x ^= x >> 15;
  x = mulmod32(x, kC2);
  x ^= x >> 16;
  return x;
}

torch::Tensor mulmod32(const torch::Tensor& x, uint64_t c) {
  const int64_t lo = static_cast<int64_t>(c & 0xffff), hi = static_cast<int64_t>(c >> 16);
  return (x * lo + ((x * hi).bitwise_and(0xffff) * 65536)).bitwise_and(static_cast<int64_t>(kM32));
}
torch::Tensor mix32(torch::Tensor x) {
  x = x.bitwise_and(static_cast<int64_t>(kM32));
  x = x.bitwise_xor(x.div(65536, "floor"));
  x = mulmod32(x, kC1);
  x = x.bitwise_xor(x.div(32768, "floor"));
  x = mulmod32(x, kC2);
  x = x.bitwise_xor(x.div(65536, "floor"));
  return x;
}
}  // namespace

double uniform_noise(uint64_t seed, uint64_t seq_id, uint64_t step, uint64_t slot) {
  uint64_t h = mix32(seed & kM32);
  h = mix32(h + (seed >> 32));
  h = mix32(h + (seq_id & kM32));
  h = mix32(h + (seq_id >> 32));
  h = mix32(h + (step & kM32));
  h = mix32(h + slot);
  return (static_cast<double>(h) + 0.5) / 4294967296.0;
}

torch::Tensor uniform_noise(uint64_t seed, const torch::Tensor& seq_id_B, const torch::Tensor& step_B, int64_t W) {
  uint64_t h0 = mix32(mix32(seed & kM32) + (seed >> 32));
  auto seq = seq_id_B.to(torch::kInt64);
  auto h = mix32(seq.bitwise_and(static_cast<int64_t>(kM32)) + static_cast<int64_t>(h0));
  h = mix32(h + seq.div(int64_t{1} << 32, "floor"));
  h = mix32(h + step_B.to(torch::kInt64).bitwise_and(static_cast<int64_t>(kM32)));
  auto slot = torch::arange(W, seq.options());
  h = mix32(h.unsqueeze(1) + slot.unsqueeze(0));
  return (h.to(torch::kFloat64) + 0.5) / 4294967296.0;
}

// ---- drawing -----------------------------------------------------------------------------------
Draw draw_tokens(const torch::Tensor& logits_BWV, const torch::Tensor& uniform_BW, const SamplingParams& p,
                 bool want_logprob) {
  DICE_CHECK(logits_BWV.dim() == 3, "logits must be [B, W, V]");
  const int64_t B = logits_BWV.size(0), W = logits_BWV.size(1), V = logits_BWV.size(2);
  const bool use_top_k = p.top_k > 0 && p.top_k < V;
  const bool use_top_p = p.top_p < 1.0;
  torch::Tensor logits;  // fp32 copy, made only where needed (the fused draw reads the logits as they are)
  auto fp32 = [&]() -> const torch::Tensor& {
    if (!logits.defined()) logits = logits_BWV.to(torch::kFloat32);
    return logits;
  };
  // fp32 logits / T (T = temperature, or 1 if 0), made once: the draw, the confidence and the log-prob
  const double T = p.temperature > 0 ? p.temperature : 1.0;
  torch::Tensor scaled_logits;
  auto tempered = [&]() -> const torch::Tensor& {
    if (!scaled_logits.defined()) scaled_logits = T == 1.0 ? fp32() : fp32() / T;
    return scaled_logits;
  };
  Draw d;
  if (p.greedy()) {
    d.tokens = fp32().argmax(-1);
    const auto& scaled = tempered();
    auto lse = scaled.logsumexp(-1);
    d.confidence = (scaled.gather(-1, d.tokens.unsqueeze(-1)).squeeze(-1) - lse).exp();
  } else if (p.fused && !use_top_k && !use_top_p) {  // one kernel over the whole vocabulary
    auto [tokens, probs] = model::fused::sample_rows(logits_BWV.reshape({-1, V}), uniform_BW.reshape({-1}), p.temperature);
    d.tokens = tokens.view({B, W});
    d.confidence = probs.view({B, W});
  } else {
    const auto& scaled = tempered();
    torch::Tensor cand, cand_idx;  // candidate logits (descending when filtered) and their vocab ids
    if (use_top_k) {
      auto tk = scaled.topk(p.top_k, -1, /*largest=*/true, /*sorted=*/true);
      cand = std::get<0>(tk);
      cand_idx = std::get<1>(tk);
    } else if (use_top_p) {
      auto s = scaled.sort(-1, /*descending=*/true);
      cand = std::get<0>(s);
      cand_idx = std::get<1>(s);
    } else {
      cand = scaled;
    }
    if (use_top_p) {
      // Keep the smallest prefix whose mass reaches top_p (the first candidate always stays).
      auto probs = cand.softmax(-1);
      auto before = probs.cumsum(-1) - probs;
      cand = cand.masked_fill(before > p.top_p, -std::numeric_limits<float>::infinity());
    }
    auto [j, probs] = model::fused::sample_rows_reference(cand.reshape({-1, cand.size(-1)}), uniform_BW.reshape({-1}), 1.0);
    j = j.view({B, W});
    d.confidence = probs.view({B, W});
    d.tokens = cand_idx.defined() ? cand_idx.gather(-1, j.unsqueeze(-1)).squeeze(-1) : j;
  }
  if (want_logprob) {  // at the sampling temperature: the policy the learner scores (rl::ScoreOptions)
    const auto& scaled = tempered();
    d.logprob = scaled.gather(-1, d.tokens.unsqueeze(-1)).squeeze(-1) - scaled.logsumexp(-1);
  }
  return d;
}

// ---- schedule and selection --------------------------------------------------------------------
int64_t transfer_count(int64_t n_masked, int64_t step, int64_t steps) {
  DICE_CHECK(steps > 0 && n_masked >= 0 && step >= 0);
  if (step >= steps) return n_masked;
  return n_masked / steps + (step < n_masked % steps ? 1 : 0);
}

torch::Tensor transfer_count(const torch::Tensor& n_masked_B, const torch::Tensor& step_B, int64_t steps) {
  auto base = n_masked_B.div(steps, "floor");
  auto extra = (step_B < n_masked_B.remainder(steps)).to(torch::kInt64);
  return torch::where(step_B >= steps, n_masked_B, base + extra);
}

torch::Tensor select_unmask(const torch::Tensor& confidence_BW, const torch::Tensor& masked_BW,
                            const torch::Tensor& k_B, Strategy strategy, double threshold) {
  const int64_t W = masked_BW.size(1);
  auto n_masked = masked_BW.sum(1);
  auto k = torch::minimum(k_B.clamp_min(1), n_masked).unsqueeze(1);  // [B, 1]; 0 where no masks
  auto iota = torch::arange(W, k_B.options()).unsqueeze(0);

  if (strategy == Strategy::kSequential) {
    auto order = masked_BW.to(torch::kInt64).cumsum(1);  // 1-based rank among masked, left to right
    return masked_BW & (order <= k);
  }
  // Rank of each position by confidence, masked first, descending, ties leftmost (stable sort).
  auto conf = confidence_BW.to(torch::kFloat32).masked_fill(masked_BW.logical_not(), -1.0f);
  auto order = std::get<1>(conf.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  auto rank = torch::empty_like(order).scatter_(1, order, iota.expand_as(order));
  auto top = masked_BW & (rank < k);
  if (strategy == Strategy::kStatic) return top;
  auto above = masked_BW & (conf > threshold);
  auto enough = above.sum(1, /*keepdim=*/true) >= k;
  return torch::where(enough, above, top);
}

BlockState BlockState::empty(int64_t B, int64_t W, int64_t mask_id, torch::Device device) {
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  BlockState s;
  s.tokens = torch::full({B, W}, mask_id, i64);
  s.masked = torch::ones({B, W}, i64.dtype(torch::kBool));
  s.n_masked_init = torch::full({B}, W, i64);
  s.step_in_block = torch::zeros({B}, i64);
  s.global_step = torch::zeros({B}, i64);
  s.unmask_step = torch::full({B, W}, -1, i64);
  s.logprob = torch::zeros({B, W}, i64.dtype(torch::kFloat32));
  return s;
}

torch::Tensor apply_step(BlockState& st, const Draw& d, const torch::Tensor& active_B, int64_t steps,
                         Strategy strategy, double threshold) {
  auto k = transfer_count(st.n_masked_init, st.step_in_block, steps);
  auto stepping = active_B & st.masked.any(1);  // [B]
  auto sel = select_unmask(d.confidence, st.masked, k, strategy, threshold) & stepping.unsqueeze(1);
  st.tokens = torch::where(sel, d.tokens, st.tokens);
  st.unmask_step = torch::where(sel, st.global_step.unsqueeze(1), st.unmask_step);
  if (d.logprob.defined()) st.logprob = torch::where(sel, d.logprob, st.logprob);
  st.masked = st.masked & sel.logical_not();
  auto inc = stepping.to(torch::kInt64);
  st.step_in_block = st.step_in_block + inc;
  st.global_step = st.global_step + inc;
  return sel;
}

}  // namespace dice::rollout
