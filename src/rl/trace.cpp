// TraceRL rows from step maps on the sampler's absolute block grid (see trace.h).
#include "dice/rl/trace.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "dice/model/masks.h"
#include "dice/util/error.h"

namespace dice::rl {
namespace {

// The whole trajectory as the sampler's rows held it: tokens and unmask steps (-1 = prompt).
struct Sequence {
  std::vector<int64_t> ids, steps;
  int64_t prompt = 0, response = 0;
};

Sequence flatten(const Trajectory& t, int64_t W) {
  DICE_REQUIRE(t.step_map.size() == t.response_ids.size(), "A trajectory has ", t.response_ids.size(),
               " response tokens but ", t.step_map.size(), " step-map entries.");
  DICE_REQUIRE(t.tail_steps.size() == t.tail_ids.size(), "A trajectory has ", t.tail_ids.size(), " tail tokens but ",
               t.tail_steps.size(), " tail steps.");
  DICE_REQUIRE(!t.prompt_ids.empty(), "A trajectory has an empty prompt.");
  Sequence s;
  s.prompt = static_cast<int64_t>(t.prompt_ids.size());
  s.response = static_cast<int64_t>(t.response_ids.size());
  s.ids = t.prompt_ids;
  s.ids.insert(s.ids.end(), t.response_ids.begin(), t.response_ids.end());
  s.ids.insert(s.ids.end(), t.tail_ids.begin(), t.tail_ids.end());
  s.steps.assign(t.prompt_ids.size(), -1);
  s.steps.insert(s.steps.end(), t.step_map.begin(), t.step_map.end());
  s.steps.insert(s.steps.end(), t.tail_steps.begin(), t.tail_steps.end());
  const int64_t L = static_cast<int64_t>(s.ids.size());
  DICE_REQUIRE(L % W == 0, "A trajectory of ", s.prompt, " prompt + ", s.response, " response + ", t.tail_ids.size(),
               " tail tokens does not end on a block boundary (block size ", W,
               "): the sampler's record is missing the rest of its final block.");
  for (int64_t i = s.prompt; i < L; ++i)
    DICE_REQUIRE(s.steps[i] >= 0, "Generated token ", i - s.prompt, " has unmask step ", s.steps[i], ".");
  return s;
}

// A block's rounds: for each, the first step of the round and the last.
std::vector<std::pair<int64_t, int64_t>> block_rounds(const Sequence& s, int64_t b, int64_t W, int64_t shrink) {
  std::vector<int64_t> distinct;
  for (int64_t i = b * W; i < (b + 1) * W; ++i)
    if (s.steps[i] >= 0) distinct.push_back(s.steps[i]);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::pair<int64_t, int64_t>> rounds;
  for (size_t k = 0; k < distinct.size(); k += static_cast<size_t>(shrink))
    rounds.emplace_back(distinct[k], distinct[std::min(distinct.size(), k + static_cast<size_t>(shrink)) - 1]);
  return rounds;
}

void append_clean(TraceRow& r, const Sequence& s, int64_t W) {
  const int64_t L = static_cast<int64_t>(s.ids.size());
  for (int64_t i = 0; i < L; ++i) {
    r.ids.push_back(s.ids[i]);
    r.positions.push_back(i);
    r.block.push_back(i / W);
    r.copy.push_back(-1);
    r.noisy.push_back(0);
  }
}

// Block b's noisy copy for the round [first, last]; its targets are recorded.
void append_noisy(TraceRow& r, const Sequence& s, int64_t b, int64_t first, int64_t last, int64_t copy,
                  const TraceOptions& o) {
  const int64_t W = o.block_size;
  for (int64_t i = b * W; i < (b + 1) * W; ++i) {
    const bool hidden = s.steps[i] >= first;
    if (hidden && s.steps[i] <= last && i >= s.prompt && i < s.prompt + s.response) {
      r.target_pos.push_back(static_cast<int64_t>(r.ids.size()));
      r.target_token.push_back(s.ids[i]);
      r.target_resp.push_back(i - s.prompt);
    }
    r.ids.push_back(hidden ? o.mask_token_id : s.ids[i]);
    r.positions.push_back(i);
    r.block.push_back(b);
    r.copy.push_back(copy);
    r.noisy.push_back(1);
  }
}

}  // namespace

std::vector<TraceRow> trace_rows(const Trajectory& t, const TraceOptions& o, int64_t trajectory) {
  DICE_REQUIRE(o.block_size > 0, "trace block_size must be > 0, got ", o.block_size, ".");
  DICE_REQUIRE(o.shrink >= 1, "trace shrink must be >= 1, got ", o.shrink, ".");
  DICE_REQUIRE(o.layout == "packed" || o.layout == "reference", "trace layout must be packed or reference, got '",
               o.layout, "'.");
  const int64_t W = o.block_size;
  Sequence s = flatten(t, W);
  const int64_t first_block = s.prompt / W, blocks = static_cast<int64_t>(s.ids.size()) / W;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rounds;
  size_t max_rounds = 0;
  for (int64_t b = first_block; b < blocks; ++b) {
    rounds.push_back(block_rounds(s, b, W, o.shrink));
    max_rounds = std::max(max_rounds, rounds.back().size());
  }
  auto has_targets = [&](int64_t b, const std::pair<int64_t, int64_t>& rd) {
    for (int64_t i = std::max(b * W, s.prompt); i < std::min((b + 1) * W, s.prompt + s.response); ++i)
      if (s.steps[i] >= rd.first && s.steps[i] <= rd.second) return true;
    return false;
  };

  std::vector<TraceRow> rows;
  if (o.layout == "packed") {
    TraceRow r;
    r.trajectory = trajectory;
    append_clean(r, s, W);
    int64_t copy = 0;
    for (size_t k = 0; k < max_rounds; ++k)
      for (int64_t b = first_block; b < blocks; ++b) {
        const auto& rb = rounds[static_cast<size_t>(b - first_block)];
        if (k < rb.size() && has_targets(b, rb[k])) append_noisy(r, s, b, rb[k].first, rb[k].second, copy++, o);
      }
    if (!r.target_pos.empty()) rows.push_back(std::move(r));
    return rows;
  }
  for (size_t k = 0; k < max_rounds; ++k) {
    TraceRow r;
    r.trajectory = trajectory;
    append_clean(r, s, W);
    for (int64_t b = first_block; b < blocks; ++b) {
      const auto& rb = rounds[static_cast<size_t>(b - first_block)];
      // A block without round k is shown fully unmasked (no targets; nothing attends to it).
      if (k < rb.size()) append_noisy(r, s, b, rb[k].first, rb[k].second, 0, o);
      else append_noisy(r, s, b, INT64_MAX, INT64_MAX, 0, o);
    }
    if (!r.target_pos.empty()) rows.push_back(std::move(r));
  }
  return rows;
}

namespace {
// fp32 logits at a temperature, divided as the sampler divides them (rollout/unmask.cpp)
torch::Tensor scaled(const torch::Tensor& logits, double temperature) {
  auto f = logits.to(torch::kFloat32);
  return temperature == 1.0 ? f : f / temperature;
}

class ChunkedLogprob : public torch::autograd::Function<ChunkedLogprob> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h_NH,
                               const torch::Tensor& w_VH, const torch::Tensor& token_N, int64_t chunk,
                               double temperature) {
    const int64_t N = h_NH.size(0);
    auto lp_N = torch::empty({N}, h_NH.options().dtype(torch::kFloat32));
    auto lse_N = torch::empty({N}, h_NH.options().dtype(torch::kFloat32));
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto logits = scaled(torch::linear(h_NH.narrow(0, s, n), w_VH), temperature);
      auto lse = torch::logsumexp(logits, -1);
      lse_N.narrow(0, s, n).copy_(lse);
      lp_N.narrow(0, s, n).copy_(logits.gather(1, token_N.narrow(0, s, n).unsqueeze(1)).squeeze(1) - lse);
    }
    ctx->save_for_backward({h_NH, w_VH, token_N, lse_N});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["temperature"] = temperature;
    return lp_N;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &h_NH = saved[0], &w_VH = saved[1], &token_N = saved[2], &lse_N = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), N = h_NH.size(0);
    const double temperature = ctx->saved_data["temperature"].toDouble();
    auto g_N = grads[0].to(torch::kFloat32);
    auto dh = torch::empty_like(h_NH);
    torch::Tensor dw;
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto h = h_NH.narrow(0, s, n);
      auto logits = scaled(torch::linear(h, w_VH), temperature);
      // d lp / d logits = (onehot(token) - softmax) / T, times the incoming gradient
      auto g = g_N.narrow(0, s, n).unsqueeze(1);
      if (temperature != 1.0) g = g / temperature;
      auto dlogits = (logits - lse_N.narrow(0, s, n).unsqueeze(1)).exp_().mul_(g).neg_();
      dlogits.scatter_add_(1, token_N.narrow(0, s, n).unsqueeze(1), g);
      auto d = dlogits.to(w_VH.scalar_type());
      dh.narrow(0, s, n).copy_(torch::matmul(d, w_VH));
      auto dw_c = torch::matmul(d.t(), h);
      if (!dw.defined()) dw = n == N ? dw_c : dw_c.to(torch::kFloat32);
      else dw.add_(dw_c);
    }
    if (!dw.defined()) dw = torch::zeros_like(w_VH);
    return {dh, dw.to(w_VH.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor chunked_token_logprobs(const torch::Tensor& h_NH, const torch::Tensor& w_VH, const torch::Tensor& token_N,
                                     int64_t chunk, double temperature) {
  DICE_REQUIRE(chunk > 0, "The log-prob chunk must hold at least one target, got ", chunk, ".");
  DICE_REQUIRE(temperature > 0, "Log-probs need a temperature > 0, got ", temperature, ".");
  return ChunkedLogprob::apply(h_NH, w_VH, token_N, chunk, temperature);
}

torch::Tensor token_logprobs(model::Transformer& model, const TraceBatch& b, const ScoreOptions& opts) {
  model::ForwardArgs fa;
  fa.ids = b.ids_BT;
  fa.positions = b.positions_BT;
  if (!opts.fast) {
    DICE_REQUIRE(b.mask_B1TT.defined(), "The plain scoring path needs a batch collated with its dense mask.");
    fa.mask = b.mask_B1TT;
    fa.logits_at = b.target_flat_N;
    torch::Tensor logits_NV;
    {
      RECORD_USER_SCOPE("dice::logits");
      logits_NV = scaled(model->forward(fa), opts.temperature);
    }
    return torch::log_softmax(logits_NV, -1).gather(1, b.target_token_N.unsqueeze(1)).squeeze(1);
  }
  DICE_REQUIRE(b.sparse, "The fast scoring path needs a batch collated with its sparse attention plan.");
  fa.sparse = b.sparse.get();
  fa.checkpoint = opts.checkpoint;
  fa.train_fused = opts.fused;
  auto h_BTH = model->hidden(fa);
  RECORD_USER_SCOPE("dice::logits");
  auto h_NH = h_BTH.reshape({-1, h_BTH.size(-1)}).index_select(0, b.target_flat_N);
  return chunked_token_logprobs(h_NH, model->lm_head_weight(), b.target_token_N, opts.logit_chunk, opts.temperature);
}

int64_t padded_tokens(const std::vector<const TraceRow*>& rows) {
  int64_t T = 0;
  for (const auto* r : rows) T = std::max<int64_t>(T, static_cast<int64_t>(r->ids.size()));
  return T * static_cast<int64_t>(rows.size());
}

TraceBatch collate(const std::vector<TraceRow>& rows, torch::Device device, const ScoreOptions& opts) {
  DICE_REQUIRE(!rows.empty(), "collate needs at least one row.");
  const int64_t B = static_cast<int64_t>(rows.size());
  int64_t T = 0;
  for (const auto& r : rows) T = std::max<int64_t>(T, static_cast<int64_t>(r.ids.size()));
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto ids = torch::zeros({B, T}, i64), pos = torch::zeros({B, T}, i64), seg = torch::full({B, T}, -1, i64);
  auto blk = torch::zeros({B, T}, i64), cpy = torch::full({B, T}, -1, i64);
  auto noisy = torch::zeros({B, T}, torch::kBool);
  std::vector<int64_t> flat, tok, traj, resp;
  for (int64_t b = 0; b < B; ++b) {
    const auto& r = rows[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(r.ids.size());
    ids[b].narrow(0, 0, n).copy_(torch::tensor(r.ids, i64));
    pos[b].narrow(0, 0, n).copy_(torch::tensor(r.positions, i64));
    seg[b].narrow(0, 0, n).fill_(0);
    blk[b].narrow(0, 0, n).copy_(torch::tensor(r.block, i64));
    cpy[b].narrow(0, 0, n).copy_(torch::tensor(r.copy, i64));
    std::vector<int64_t> nz(r.noisy.begin(), r.noisy.end());
    noisy[b].narrow(0, 0, n).copy_(torch::tensor(nz, i64).to(torch::kBool));
    for (size_t j = 0; j < r.target_pos.size(); ++j) {
      flat.push_back(b * T + r.target_pos[j]);
      tok.push_back(r.target_token[j]);
      traj.push_back(r.trajectory);
      resp.push_back(r.target_resp[j]);
    }
  }
  model::TokenLayout lay{seg, blk, noisy, cpy};
  TraceBatch out;
  if (opts.fast) out.sparse = std::make_shared<model::SparseAttention>(model::block_diffusion_plan(lay, opts.attn_chunk, device));
  else out.mask_B1TT = model::block_diffusion_mask(lay, lay, true).to(device);
  out.ids_BT = ids.to(device);
  out.positions_BT = pos.to(device);
  out.target_flat_N = torch::tensor(flat, i64).to(device);
  out.target_token_N = torch::tensor(tok, i64).to(device);
  out.target_traj_N = torch::tensor(traj, i64);
  out.target_resp_N = torch::tensor(resp, i64);
  out.rows = B;
  out.row_tokens = T;
  return out;
}

}  // namespace dice::rl
