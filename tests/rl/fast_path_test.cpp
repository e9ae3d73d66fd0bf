// The learner's fast scoring path (block-sparse attention plan, log-probs in chunks from hidden
// states, optional checkpointed layers) against the plain one (dense [B, 1, T, T] mask, full
// log-softmax), fp32 on the CPU: the same log-probs, loss and gradients, on batches of rows of
// different lengths (padding), prompts of every length modulo the block size, static and dynamic
// step maps, packed and reference layouts; with the training-fused forward (packed q|k|v and
// gate|up GEMMs; on the CPU the fused operators are the composite ops) and without it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <tuple>

#include "dice/model/masks.h"
#include "dice/model/train_ops.h"
#include "dice/rl/loss.h"
#include "dice/rl/trace.h"
#include "dice/rollout/sampler.h"
#include "model/tiny_model.h"

namespace dice::rl {
namespace {

std::vector<rollout::SampleRecord> sample(model::Transformer& m, const std::string& strategy, double threshold,
                                          int64_t steps) {
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t L = 5; L <= 12; ++L) {  // every prompt length modulo the block size (4), twice
    std::vector<int64_t> p;
    for (int64_t i = 0; i < L; ++i) p.push_back((L * 131 + i * 97) % 500);
    prompts.push_back(p);
  }
  rollout::SamplerConfig sc;
  sc.strategy = strategy;
  sc.steps = steps;
  sc.threshold = threshold;
  sc.temperature = 1.0;
  sc.top_k = 0;
  sc.top_p = 1.0;
  sc.max_new_tokens = 23;
  sc.max_len = 64;
  sc.max_batch = 8;
  sc.seed = 11;
  for (int64_t t = 0; t < 500; t += 29) sc.stop_ids.push_back(t);  // some stop early: rows of other lengths
  rollout::Sampler s(m, sc);
  return s.generate(prompts);
}

struct Scored {
  torch::Tensor lp, loss;
  std::map<std::string, torch::Tensor> grads;
  TraceBatch batch;
};

Scored score(model::Transformer& m, const std::vector<TraceRow>& rows, const ScoreOptions& so) {
  Scored out;
  out.batch = collate(rows, torch::kCPU, so);
  m->zero_grad();
  out.lp = token_logprobs(m, out.batch, so);
  const auto& b = out.batch;
  const int64_t N = out.lp.size(0);
  // old log-probs a little off (ratios away from 1, some clipped), advantages of both signs
  auto old = out.lp.detach() + 0.3 * torch::sin(torch::arange(N, torch::kFloat32));
  auto adv = (((b.target_traj_N * 5) % 7).to(torch::kFloat64) - 3) / 2;
  auto w = torch::full({N}, 1.0 / 40, torch::kFloat64);
  LossConfig lc;
  out.loss = tracerl_loss(out.lp, old, torch::Tensor(), adv, w, lc).loss;
  out.loss.backward();
  for (auto& p : m->named_parameters()) out.grads[p.key()] = p.value().grad().clone();
  return out;
}

// (strategy, threshold, steps per block, layout, attn_chunk, logit_chunk, checkpoint)
using Case = std::tuple<std::string, double, int64_t, std::string, int64_t, int64_t, int64_t>;
class FastPath : public ::testing::TestWithParam<Case> {};

TEST_P(FastPath, EqualsPlainPath) {
  const auto& [strategy, threshold, steps, layout, attn_chunk, logit_chunk, checkpoint] = GetParam();
  auto m = model::testing::tiny_model(9);
  auto recs = sample(m, strategy, threshold, steps);
  TraceOptions to;
  to.mask_token_id = m->config().mask_token_id;
  to.layout = layout;
  std::vector<TraceRow> rows;
  std::set<size_t> lengths;
  std::set<int64_t> prompt_mods;
  for (size_t i = 0; i < recs.size(); ++i) {
    Trajectory t{recs[i].prompt_ids, recs[i].response_ids, recs[i].step_map, recs[i].tail_ids, recs[i].tail_steps, 1.0};
    for (auto& r : trace_rows(t, to, static_cast<int64_t>(i))) {
      lengths.insert(r.ids.size());
      rows.push_back(std::move(r));
    }
    prompt_mods.insert(static_cast<int64_t>(recs[i].prompt_ids.size()) % 4);
  }
  ASSERT_GT(lengths.size(), 1u) << "all rows have one length: the batch has no padding";
  ASSERT_EQ(prompt_mods.size(), 4u);

  ScoreOptions fast;
  fast.attn_chunk = attn_chunk;
  fast.logit_chunk = logit_chunk;
  fast.checkpoint = checkpoint;
  auto plain = score(m, rows, plain_scoring());
  auto quick = score(m, rows, fast);
  ASSERT_TRUE(fast.fused);  // the default: ForwardArgs::train_fused
  ScoreOptions unfused = fast;
  unfused.fused = false;
  auto quick_unfused = score(m, rows, unfused);

  // The plan: no dense mask, several chunks, and exactly the dense mask's pairs of valid queries.
  ASSERT_FALSE(quick.batch.mask_B1TT.defined());
  ASSERT_TRUE(quick.batch.sparse);
  const auto& plan = *quick.batch.sparse;
  if (attn_chunk < 16) EXPECT_GT(plan.chunks.size(), rows.size());  // rows split into several chunks
  else EXPECT_EQ(plan.chunks.size(), rows.size());                  // a chunk per (short) row
  const int64_t T = plain.batch.row_tokens;
  auto valid = plain.batch.ids_BT.new_zeros({plain.batch.rows, T}, torch::kBool);
  for (size_t r = 0; r < rows.size(); ++r) valid[static_cast<int64_t>(r)].narrow(0, 0, static_cast<int64_t>(rows[r].ids.size())).fill_(true);
  const int64_t dense_allowed = plain.batch.mask_B1TT.squeeze(1).logical_and(valid.unsqueeze(2)).sum().item<int64_t>();
  EXPECT_EQ(plan.allowed, dense_allowed);
  EXPECT_LT(plan.pairs, plain.batch.rows * T * T);

  ASSERT_EQ(quick.lp.sizes(), plain.lp.sizes());
  EXPECT_LT((quick.lp - plain.lp).abs().max().item<double>(), 2e-5);
  EXPECT_NEAR(quick.loss.item<double>(), plain.loss.item<double>(), 1e-6 + 1e-5 * std::abs(plain.loss.item<double>()));
  EXPECT_LT((quick_unfused.lp - plain.lp).abs().max().item<double>(), 2e-5);
  for (const auto& [name, g] : plain.grads) {
    const double scale = std::max(1e-8, g.abs().max().item<double>());
    EXPECT_LT((quick.grads.at(name) - g).abs().max().item<double>() / scale, 2e-4) << name;
    EXPECT_LT((quick_unfused.grads.at(name) - g).abs().max().item<double>() / scale, 2e-4) << name << " (unfused)";
  }
}

// Gathers with one gradient buffer: the outputs and the source's gradient equal index_select's,
// with overlapping indices and an output that gets no gradient.
TEST(GatherRows, EqualsIndexSelect) {
  torch::manual_seed(5);
  auto src = torch::randn({3, 20, 4}, torch::requires_grad());
  std::vector<torch::Tensor> idx = {torch::tensor({0, 5, 7, 19}), torch::tensor({5, 6, 7, 8, 9, 0}),
                                    torch::tensor({1, 2}), torch::tensor({19, 18})};
  auto got = model::train::gather_rows(src, idx);
  ASSERT_EQ(got.size(), idx.size());
  torch::Tensor loss = torch::zeros({});
  for (size_t i = 0; i + 1 < got.size(); ++i)  // the last output is not used
    loss = loss + (got[i] * torch::sin(torch::arange(got[i].numel()).view(got[i].sizes()) * (1.0 + i))).sum();
  loss.backward();
  auto dsrc = src.grad().clone();
  src.mutable_grad() = torch::Tensor();
  torch::Tensor want_loss = torch::zeros({});
  for (size_t i = 0; i < idx.size(); ++i) {
    auto w = src.index_select(1, idx[i]);
    EXPECT_TRUE(torch::equal(w, got[i])) << i;
    if (i + 1 < idx.size())
      want_loss = want_loss + (w * torch::sin(torch::arange(w.numel()).view(w.sizes()) * (1.0 + i))).sum();
  }
  want_loss.backward();
  EXPECT_LT((dsrc - src.grad()).abs().max().item<double>(), 1e-6);
  EXPECT_TRUE(model::train::gather_rows(src, {}).empty());
}

// One GEMM over packed rows: the output and every part's gradient equal separate linears.
TEST(PackedLinear, EqualsSeparateLinears) {
  torch::manual_seed(4);
  auto x = torch::randn({2, 5, 16}, torch::requires_grad());
  for (size_t n : {2u, 3u}) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < n; ++i) parts.push_back(torch::randn({static_cast<int64_t>(3 + 4 * i), 16}, torch::requires_grad()));
    auto packed = torch::cat(parts, 0).detach();
    auto g = torch::randn({2, 5, packed.size(0)});
    auto got = n == 2 ? model::train::packed_linear(x, packed, {parts[0], parts[1]})
                      : model::train::packed_linear(x, packed, {parts[0], parts[1], parts[2]});
    (got * g).sum().backward();
    std::vector<torch::Tensor> dp;
    for (auto& p : parts) {
      dp.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    auto dx = x.grad().clone();
    x.mutable_grad() = torch::Tensor();
    std::vector<torch::Tensor> outs;
    for (auto& p : parts) outs.push_back(torch::linear(x, p));
    auto want = torch::cat(outs, -1);
    (want * g).sum().backward();
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5) << n;
    EXPECT_LT((dx - x.grad()).abs().max().item<double>(), 1e-5) << n;
    for (size_t i = 0; i < n; ++i) EXPECT_LT((dp[i] - parts[i].grad()).abs().max().item<double>(), 1e-5) << n << " part " << i;
    x.mutable_grad() = torch::Tensor();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, FastPath,
    ::testing::Values(Case{"static", 0.9, 4, "packed", 3, 7, 0}, Case{"static", 0.9, 2, "packed", 8, 1000, -1},
                      Case{"dynamic", 0.0024, 4, "packed", 5, 13, 1},
                      Case{"dynamic", 0.0024, 4, "packed", 1000, 1, 0},
                      Case{"static", 0.9, 4, "reference", 6, 5, 0}));

// Chunked log-probs alone: values and both gradients equal log_softmax + gather (of logits / T).
TEST(ChunkedLogprobs, EqualsLogSoftmax) {
  torch::manual_seed(3);
  auto h = torch::randn({37, 16}, torch::requires_grad());
  auto w = torch::randn({50, 16}, torch::requires_grad());
  auto tok = torch::randint(0, 50, {37}, torch::kInt64);
  auto g = torch::randn({37});
  for (double T : {1.0, 0.6, 1.7}) {
    auto want = torch::log_softmax(torch::linear(h, w) / T, -1).gather(1, tok.unsqueeze(1)).squeeze(1);
    (want * g).sum().backward();
    auto dh = h.grad().clone(), dw = w.grad().clone();
    h.mutable_grad() = torch::Tensor();
    w.mutable_grad() = torch::Tensor();
    for (int64_t chunk : {1, 8, 37, 100}) {
      auto got = chunked_token_logprobs(h, w, tok, chunk, T);
      (got * g).sum().backward();
      EXPECT_LT((got - want).abs().max().item<double>(), 1e-5) << chunk << " T " << T;
      EXPECT_LT((h.grad() - dh).abs().max().item<double>(), 1e-5) << chunk << " T " << T;
      EXPECT_LT((w.grad() - dw).abs().max().item<double>(), 1e-5) << chunk << " T " << T;
      h.mutable_grad() = torch::Tensor();
      w.mutable_grad() = torch::Tensor();
    }
  }
}

}  // namespace
}  // namespace dice::rl
