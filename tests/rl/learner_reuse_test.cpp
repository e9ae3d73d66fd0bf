// LearnerLoop's first update takes its old log-probs from its own forward
// (LearnerOptions::reuse_first_forward) instead of a separate no-grad pass. fp32 on the CPU, a
// step of two updates (and a second step) gives the same metrics and the same updated weights
// either way, on both scoring paths and with a frozen reference model (kl_reference initial); the
// no-grad pass then scores only the second update's rows, and logp_gap still compares the
// learner's old log-probs with the sampler's (0 up to rounding: same weights, fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

#include "dice/dist/comm.h"
#include "dice/rollout/sampler.h"
#include "dice/train/learner_loop.h"
#include "model/tiny_model.h"

namespace dice::train {
namespace {

// The same tiny model every time (tiny_model draws its norm weights from the global generator).
model::Transformer policy() {
  torch::manual_seed(21);
  return model::testing::tiny_model(9);
}

std::vector<Rollout> rollouts(model::Transformer& m, double temperature = 1.0) {
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t L = 5; L <= 10; ++L) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < L; ++i) p.push_back((L * 71 + i * 13) % 500);
    prompts.push_back(p);
  }
  rollout::SamplerConfig sc;
  sc.strategy = "static";
  sc.steps = 4;
  sc.temperature = temperature;
  sc.top_k = 0;
  sc.top_p = 1.0;
  sc.max_new_tokens = 14;
  sc.max_len = 48;
  sc.max_batch = 8;
  sc.seed = 5;
  sc.record_logprobs = true;
  rollout::Sampler s(m, sc);
  auto recs = s.generate(prompts);
  std::vector<Rollout> out;
  for (size_t i = 0; i < recs.size(); ++i) {
    Rollout r;
    r.sample = r.kept = static_cast<int64_t>(i);
    r.traj = {recs[i].prompt_ids, recs[i].response_ids, recs[i].step_map, recs[i].tail_ids, recs[i].tail_steps,
              (i % 2 == 0 ? 1.0 : -0.7) * (1.0 + 0.1 * static_cast<double>(i))};
    r.logprobs = recs[i].logprobs;
    out.push_back(std::move(r));
  }
  return out;
}

struct Run {
  std::vector<nlohmann::json> metrics;
  std::vector<torch::Tensor> weights;
};

Run train_two_steps(bool reuse, bool fast, bool reference, const std::vector<Rollout>& rs) {
  RlRunConfig cfg;
  cfg.optim.fast = fast;
  cfg.optim.lr = 1e-3;  // large enough that the second update sees other weights
  cfg.optim.responses_per_update = 3;  // 6 rollouts: two updates per step
  cfg.optim.micro_batch_tokens = 120;  // several micro-batches per update
  cfg.optim.compute_dtype = "float32";
  if (reference) cfg.loss.kl_reference = "initial";
  auto comm = dist::self_comm(torch::kCPU, {"learners", "learner", 0});
  auto master = policy();
  std::optional<model::Transformer> ref;
  if (reference) ref = policy();
  LearnerOptions lo;
  lo.reuse_first_forward = reuse;
  LearnerLoop loop(cfg, master, *comm, ref, lo);
  Run out;
  for (int s = 0; s < 2; ++s) out.metrics.push_back(loop.step(rs));
  for (auto& p : master->parameters()) out.weights.push_back(p.detach().clone());
  return out;
}

class Reuse : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(Reuse, FirstUpdateOwnForwardEqualsSeparatePass) {
  const auto [fast, reference] = GetParam();
  auto sampler_model = policy();
  const auto rs = rollouts(sampler_model);
  ASSERT_EQ(rs.size(), 6u);
  const auto a = train_two_steps(true, fast, reference, rs), b = train_two_steps(false, fast, reference, rs);
  for (size_t s = 0; s < 2; ++s) {
    const auto &ma = a.metrics[s], &mb = b.metrics[s];
    ASSERT_EQ(ma["updates"].get<int64_t>(), 2);
    for (const char* k : {"loss", "policy_loss", "kl", "clip_fraction", "grad_norm", "logp_gap_mean"}) {
      const double x = ma[k].get<double>(), y = mb[k].get<double>();
      EXPECT_NEAR(x, y, 1e-6 + 1e-5 * std::abs(y)) << k << " step " << s;
    }
    EXPECT_EQ(ma["target_tokens"], mb["target_tokens"]);
    // Only the second update's rows went through the no-grad pass.
    const int64_t old_a = ma["old_logp_row_tokens"].get<int64_t>(), old_b = mb["old_logp_row_tokens"].get<int64_t>();
    EXPECT_EQ(old_b, mb["row_tokens"].get<int64_t>());
    EXPECT_GT(old_a, 0);
    EXPECT_LT(old_a, old_b);
  }
  // The sampler's weights = the first step's: its log-probs equal the learner's up to rounding.
  EXPECT_LT(a.metrics[0]["logp_gap_max"].get<double>(), 1e-4);
  EXPECT_GT(a.metrics[1]["logp_gap_mean"].get<double>(), 0.0);  // after two updates they differ
  double diff = 0, moved = 0;
  auto start = policy();
  auto p0 = start->parameters();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    diff = std::max(diff, (a.weights[i] - b.weights[i]).abs().max().item<double>());
    moved = std::max(moved, (a.weights[i] - p0[i]).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-4);  // the updates did change the weights ...
  EXPECT_LT(diff, 1e-5 * std::max(1.0, moved * 100));  // ... the same way
}

INSTANTIATE_TEST_SUITE_P(Paths, Reuse,
                         ::testing::Values(std::make_tuple(true, false), std::make_tuple(false, false),
                                           std::make_tuple(true, true)));

// Rollouts of a stage that samples at 0.6 (stages[].temperature): the learner scores at the
// temperature it is given, so its old log-probs equal the sampler's; at 1 they would not.
TEST(LearnerLoop, ScoresAtTheStagesTemperature) {
  auto sampler_model = policy();
  const auto rs = rollouts(sampler_model, 0.6);
  for (bool fast : {false, true}) {
    auto gap = [&](double temperature) {
      RlRunConfig cfg;
      cfg.optim.fast = fast;
      cfg.optim.compute_dtype = "float32";
      auto comm = dist::self_comm(torch::kCPU, {"learners", "learner", 0});
      LearnerLoop loop(cfg, policy(), *comm);
      return loop.step(rs, temperature)["logp_gap_max"].get<double>();
    };
    EXPECT_LT(gap(0.6), 1e-4) << "fast " << fast;
    EXPECT_GT(gap(0), 1e-2) << "fast " << fast << ": 0 = sampler.temperature, 1 here";
  }
}

// LearnerOptions::zero1_of (`dice bench learner --zero1-of`): one learner holds the AdamW moments of
// ZeRO-1's first shard of N and updates only those parameters, the others as they were.
TEST(LearnerLoop, Zero1OfHoldsAndUpdatesTheFirstShardOnly) {
  auto sampler_model = policy();
  const auto rs = rollouts(sampler_model);
  RlRunConfig cfg;
  cfg.optim.lr = 1e-3;
  cfg.optim.compute_dtype = "float32";
  auto count = [](const model::NamedTensors& ts) {
    int64_t n = 0;
    for (const auto& [name, t] : ts) n += t.numel();
    return n;
  };
  auto comm = dist::self_comm(torch::kCPU, {"learners", "learner", 0});
  auto whole_master = policy();
  LearnerLoop whole(cfg, whole_master, *comm);
  whole.step(rs);
  LearnerOptions lo;
  lo.zero1_of = 4;
  auto share_master = policy();
  std::map<std::string, torch::Tensor> before;
  int64_t params = 0;
  for (const auto& p : share_master->named_parameters()) {
    before[p.key()] = p.value().detach().clone();
    params += p.value().numel();
  }
  LearnerLoop share(cfg, share_master, *comm, std::nullopt, lo);
  share.step(rs);
  const auto all = whole.optimizer().state(), mine = share.optimizer().state();
  EXPECT_EQ(count(all.m), params);
  EXPECT_GT(count(mine.m), 0);
  EXPECT_LT(count(mine.m), count(all.m) / 2) << "about a quarter of the moments";
  int64_t moved = 0, kept = 0;
  for (const auto& p : share_master->named_parameters()) {
    const std::string& name = p.key();
    const bool owned = mine.m.count(name) > 0;
    const bool changed = !torch::equal(p.value().detach(), before.at(name));
    moved += owned && changed;
    kept += !owned && !changed;
    EXPECT_FALSE(!owned && changed) << name << " is not in the first shard, yet it moved";
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(kept, 0);
}

}  // namespace
}  // namespace dice::train
