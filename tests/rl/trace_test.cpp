// TraceRL rows: the learner scores every token exactly as the sampler produced it, packed and
// reference layouts agree, and the row structure follows the step map.
#include "dice/rl/trace.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "dice/rollout/sampler.h"
#include "dice/util/error.h"
#include "model/tiny_model.h"

namespace dice::rl {
namespace {

std::vector<std::vector<int64_t>> prompts_of_every_length(int64_t first, int64_t last) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t L = first; L <= last; ++L) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < L; ++i) p.push_back((L * 131 + i * 97) % 500);
    out.push_back(p);
  }
  return out;
}

Trajectory from_record(const rollout::SampleRecord& r) {
  return {r.prompt_ids, r.response_ids, r.step_map, r.tail_ids, r.tail_steps, 1.0};
}

std::vector<rollout::SampleRecord> sample_traced(model::Transformer& m, const std::string& strategy, double threshold,
                                          int64_t steps = 4, double temperature = 1.0) {
  rollout::SamplerConfig sc;
  sc.strategy = strategy;
  sc.steps = steps;
  sc.threshold = threshold;
  sc.temperature = temperature;
  sc.top_k = 0;
  sc.top_p = 1.0;
  sc.max_new_tokens = 21;  // not a multiple of the block: the last block has a tail
  sc.record_logprobs = true;
  sc.max_len = 64;
  sc.max_batch = 5;
  sc.seed = 7;
  // Many stop ids, so some sequences stop inside a block (their block's rest is the tail).
  for (int64_t t = 0; t < 500; t += 23) sc.stop_ids.push_back(t);
  rollout::Sampler s(m, sc);
  return s.generate(prompts_of_every_length(5, 12));
}

// (strategy, threshold, denoising steps per block, temperature): static 4 steps unmasks one token
// per step, static 2 steps two tokens per step, dynamic a mix decided by the model's confidence; at a
// temperature other than 1 (an RL stage's own) the learner scores at that temperature, on both paths.
class LogprobMatch : public ::testing::TestWithParam<std::tuple<std::string, double, int64_t, double>> {};

TEST_P(LogprobMatch, LearnerEqualsSamplerForEveryToken) {
  auto m = model::testing::tiny_model(3);
  const double T = std::get<3>(GetParam());
  auto recs = sample_traced(m, std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam()), T);
  TraceOptions o;
  o.mask_token_id = m->config().mask_token_id;
  ScoreOptions plain = plain_scoring(), fast, untempered = plain_scoring();
  plain.temperature = fast.temperature = T;
  int64_t checked = 0, stops = 0;
  double off_at_1 = 0;  // how far scoring at temperature 1 would be
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& r = recs[i];
    stops += r.stop_reason == "stop_token";
    auto rows = trace_rows(from_record(r), o, static_cast<int64_t>(i));
    ASSERT_EQ(rows.size(), 1u);
    auto b = collate(rows, torch::kCPU, plain);
    torch::NoGradGuard ng;
    auto lp = token_logprobs(m, b, plain);
    auto lp_fast = token_logprobs(m, collate(rows, torch::kCPU, fast), fast);
    off_at_1 = std::max(off_at_1, (token_logprobs(m, b, untempered) - lp).abs().max().item<double>());
    auto resp = b.target_resp_N.accessor<int64_t, 1>();
    std::vector<int> seen(r.response_ids.size(), 0);
    for (int64_t j = 0; j < lp.size(0); ++j) {
      ++seen[static_cast<size_t>(resp[j])];
      EXPECT_NEAR(lp[j].item<float>(), r.logprobs[static_cast<size_t>(resp[j])], 2e-5)
          << "prompt length " << r.prompt_ids.size() << ", response token " << resp[j];
      EXPECT_NEAR(lp_fast[j].item<float>(), r.logprobs[static_cast<size_t>(resp[j])], 2e-5)
          << "fast path, prompt length " << r.prompt_ids.size() << ", response token " << resp[j];
      ++checked;
    }
    for (size_t j = 0; j < seen.size(); ++j) EXPECT_EQ(seen[j], 1) << "response token " << j << " is not one target";
  }
  EXPECT_GT(checked, 40);
  if (T != 1.0) EXPECT_GT(off_at_1, 1e-2) << "the temperature changes nothing here: the case tests nothing";
  EXPECT_GT(stops, 0) << "no sequence stopped early: the test does not cover the stop block";
  // Two tokens per step must really show up where the schedule asks for them.
  int64_t multi = 0, single = 0;
  for (const auto& r : recs) {
    std::map<int64_t, int> per_step;
    for (auto s : r.step_map) ++per_step[s];
    for (auto [s, n] : per_step) (n > 1 ? multi : single) += 1;
  }
  EXPECT_GT(single, 0);
  if (std::get<2>(GetParam()) == 2) EXPECT_GT(multi, 0) << "2 steps per block never unmasked two tokens at once";
}

INSTANTIATE_TEST_SUITE_P(Strategies, LogprobMatch,
                         ::testing::Values(std::make_tuple(std::string("static"), 0.9, int64_t{4}, 1.0),
                                           std::make_tuple(std::string("static"), 0.9, int64_t{2}, 1.0),
                                           std::make_tuple(std::string("dynamic"), 0.0024, int64_t{4}, 1.0),
                                           std::make_tuple(std::string("static"), 0.9, int64_t{4}, 0.6),
                                           std::make_tuple(std::string("dynamic"), 0.0024, int64_t{4}, 1.5)));

// Packed and reference rows: the same per-token log-probs and the same gradients.
TEST(TraceRows, PackedEqualsReference) {
  auto m = model::testing::tiny_model(5);
  auto recs = sample_traced(m, "static", 0.9, 2);  // two rounds per block, two targets per round
  TraceOptions packed, ref;
  packed.mask_token_id = ref.mask_token_id = m->config().mask_token_id;
  ref.layout = "reference";
  auto run = [&](const TraceOptions& o, std::map<std::pair<int64_t, int64_t>, float>& lp_out) {
    std::vector<TraceRow> rows;
    for (size_t i = 0; i < recs.size(); ++i) {
      auto r = trace_rows(from_record(recs[i]), o, static_cast<int64_t>(i));
      rows.insert(rows.end(), r.begin(), r.end());
    }
    auto b = collate(rows, torch::kCPU);
    m->zero_grad();
    auto lp = token_logprobs(m, b);
    // A fixed, token-dependent linear functional of the log-probs, as a loss would be.
    auto tr = b.target_traj_N, rp = b.target_resp_N;
    auto w = ((tr * 31 + rp * 7) % 11).to(torch::kFloat32) - 5;
    (lp * w).sum().backward();
    for (int64_t j = 0; j < lp.size(0); ++j) lp_out[{tr[j].item<int64_t>(), rp[j].item<int64_t>()}] = lp[j].item<float>();
    std::map<std::string, torch::Tensor> grads;
    for (auto& p : m->named_parameters()) grads[p.key()] = p.value().grad().clone();
    return std::make_pair(rows.size(), grads);
  };
  std::map<std::pair<int64_t, int64_t>, float> lp_packed, lp_ref;
  auto [n_packed, g_packed] = run(packed, lp_packed);
  auto [n_ref, g_ref] = run(ref, lp_ref);
  EXPECT_EQ(n_packed, recs.size());
  EXPECT_GT(n_ref, n_packed);
  ASSERT_EQ(lp_packed.size(), lp_ref.size());
  for (const auto& [k, v] : lp_packed) EXPECT_NEAR(v, lp_ref.at(k), 1e-5);
  for (const auto& [name, g] : g_packed) {
    const double scale = std::max(1e-6, g.abs().max().item<double>());
    EXPECT_LT((g - g_ref.at(name)).abs().max().item<double>() / scale, 1e-4) << name;
  }
}

// The rows of a hand-made trajectory: prompt of 6 (tail of 2 in the first decode block), two
// generated blocks; block 1 decoded as {2}, {0, 1}... see the step values below.
TEST(TraceRows, StructureFollowsTheStepMap) {
  Trajectory t;
  t.prompt_ids = {10, 11, 12, 13, 14, 15};
  t.response_ids = {20, 21, 22, 23, 24};  // positions 6..10; 11 is the tail
  t.step_map = {1, 0, 2, 2, 3};
  t.tail_ids = {99};
  t.tail_steps = {2};
  TraceOptions o;
  o.mask_token_id = 7;
  auto rows = trace_rows(t, o);
  ASSERT_EQ(rows.size(), 1u);
  const auto& r = rows[0];
  // Clean part: 12 tokens; block 1 rounds {0}, {1}; block 2 rounds {2}, {3}: 4 copies of 4.
  ASSERT_EQ(r.ids.size(), 12u + 16u);
  auto copy_ids = [&](int c) { return std::vector<int64_t>(r.ids.begin() + 12 + 4 * c, r.ids.begin() + 16 + 4 * c); };
  EXPECT_EQ(copy_ids(0), (std::vector<int64_t>{14, 15, 7, 7}));    // block 1, round step 0
  EXPECT_EQ(copy_ids(1), (std::vector<int64_t>{7, 7, 7, 7}));      // block 2, round step 2
  EXPECT_EQ(copy_ids(2), (std::vector<int64_t>{14, 15, 7, 21}));   // block 1, round step 1
  EXPECT_EQ(copy_ids(3), (std::vector<int64_t>{22, 23, 7, 99}));   // block 2, round step 3
  EXPECT_EQ(r.target_resp, (std::vector<int64_t>{1, 2, 3, 0, 4}));
  EXPECT_EQ(r.target_token, (std::vector<int64_t>{21, 22, 23, 20, 24}));
  // Reference layout: one row per round (2 rounds).
  o.layout = "reference";
  EXPECT_EQ(trace_rows(t, o).size(), 2u);
  // shrink 2 merges each block's two rounds into one.
  o.layout = "packed";
  o.shrink = 2;
  EXPECT_EQ(trace_rows(t, o)[0].ids.size(), 12u + 8u);
}

TEST(TraceRows, MissingTailIsAnError) {
  Trajectory t;
  t.prompt_ids = {1, 2, 3};
  t.response_ids = {4, 5};
  t.step_map = {0, 0};
  EXPECT_THROW(trace_rows(t, TraceOptions{}), Error);
  t.step_map = {0};
  EXPECT_THROW(trace_rows(t, TraceOptions{}), Error);
}

}  // namespace
}  // namespace dice::rl
