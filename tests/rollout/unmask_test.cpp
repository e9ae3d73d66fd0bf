// Tests of the per-step unmasking core: noise, drawing, schedule, selection, block state.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "dice/rollout/unmask.h"
#include "dice/util/error.h"

using namespace dice::rollout;

namespace {
torch::Tensor i64(std::vector<int64_t> v) { return torch::tensor(v, torch::kInt64); }
}  // namespace

TEST(Noise, TensorMatchesScalarAndIsInOpenUnitInterval) {
  auto seq = i64({0, 1, 7, (int64_t{1} << 33) + 5});
  auto step = i64({0, 3, 100, 4000000000LL});
  auto u = uniform_noise(42, seq, step, 4);
  ASSERT_EQ(u.sizes(), (std::vector<int64_t>{4, 4}));
  auto a = u.accessor<double, 2>();
  std::set<double> seen;
  for (int b = 0; b < 4; ++b)
    for (int w = 0; w < 4; ++w) {
      double s = uniform_noise(42, seq[b].item<int64_t>(), step[b].item<int64_t>(), w);
      EXPECT_DOUBLE_EQ(a[b][w], s);
      EXPECT_GT(s, 0.0);
      EXPECT_LT(s, 1.0);
      seen.insert(s);
    }
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_NE(uniform_noise(42, 0, 0, 0), uniform_noise(43, 0, 0, 0));
}

TEST(Noise, RoughlyUniform) {
  auto seq = torch::arange(20000, torch::kInt64);
  auto u = uniform_noise(7, seq, torch::zeros_like(seq), 4);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.01);
  EXPECT_NEAR((u < 0.1).to(torch::kFloat64).mean().item<double>(), 0.1, 0.01);
}

TEST(Draw, GreedyTakesArgmaxWithSoftmaxConfidence) {
  auto logits = torch::tensor({1.0f, 3.0f, 2.0f, 0.0f}).reshape({1, 1, 4});
  auto u = torch::full({1, 1}, 0.01, torch::kFloat64);
  for (SamplingParams p : {SamplingParams{0.0, 0, 1.0}, SamplingParams{1.0, 1, 1.0}}) {
    auto d = draw_tokens(logits, u, p, /*want_logprob=*/true);
    EXPECT_EQ(d.tokens.item<int64_t>(), 1);
    auto sm = logits.softmax(-1);
    EXPECT_NEAR(d.confidence.item<float>(), sm[0][0][1].item<float>(), 1e-6);
    EXPECT_NEAR(d.logprob.item<float>(), std::log(sm[0][0][1].item<float>()), 1e-5);
  }
}

TEST(Draw, InverseCdfFollowsTheNoise) {
  // probs 0.1, 0.2, 0.3, 0.4: u in (0, .1] -> 0, (.1, .3] -> 1, (.3, .6] -> 2, (.6, 1) -> 3.
  auto logits = torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}).log().reshape({1, 1, 4}).expand({1, 4, 4}).contiguous();
  auto u = torch::tensor({0.05, 0.25, 0.5, 0.95}, torch::kFloat64).reshape({1, 4});
  auto d = draw_tokens(logits, u, SamplingParams{}, false);
  EXPECT_TRUE(d.tokens.equal(i64({0, 1, 2, 3}).reshape({1, 4})));
  EXPECT_TRUE(torch::allclose(d.confidence, torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}).reshape({1, 4}), 1e-5, 1e-6));
  EXPECT_FALSE(d.logprob.defined());
}

TEST(Draw, TopKAndTopPRestrictTheSupport) {
  torch::manual_seed(0);
  auto logits = torch::randn({2, 4, 50});
  auto seq = i64({0, 1});
  std::set<int64_t> allowed_k, allowed_p;
  for (int b = 0; b < 2; ++b)
    for (int w = 0; w < 4; ++w) {
      auto row = logits[b][w];
      auto top = std::get<1>(row.topk(5));
      for (int i = 0; i < 5; ++i) allowed_k.insert((b * 4 + w) * 100 + top[i].item<int64_t>());
      // nucleus of mass 0.5
      auto s = row.softmax(-1).sort(-1, true);
      auto cum = std::get<0>(s).cumsum(-1);
      for (int i = 0; i < 50; ++i) {
        allowed_p.insert((b * 4 + w) * 100 + std::get<1>(s)[i].item<int64_t>());
        if (cum[i].item<float>() >= 0.5f) break;
      }
    }
  for (int trial = 0; trial < 30; ++trial) {
    auto u = uniform_noise(trial, seq, torch::zeros_like(seq), 4);
    auto dk = draw_tokens(logits, u, SamplingParams{0.7, 5, 1.0}, false);
    auto dp = draw_tokens(logits, u, SamplingParams{1.0, 0, 0.5}, false);
    for (int b = 0; b < 2; ++b)
      for (int w = 0; w < 4; ++w) {
        EXPECT_TRUE(allowed_k.count((b * 4 + w) * 100 + dk.tokens[b][w].item<int64_t>()));
        EXPECT_TRUE(allowed_p.count((b * 4 + w) * 100 + dp.tokens[b][w].item<int64_t>()));
        EXPECT_GT(dk.confidence[b][w].item<float>(), 0.0f);
      }
  }
}

TEST(Draw, RowsAreIndependentOfTheBatch) {
  torch::manual_seed(1);
  auto logits = torch::randn({3, 4, 1000});
  auto seq = i64({5, 9, 11});
  auto step = i64({2, 0, 7});
  SamplingParams p{1.0, 0, 1.0};
  auto all = draw_tokens(logits, uniform_noise(3, seq, step, 4), p, true);
  for (int b = 0; b < 3; ++b) {
    auto one = draw_tokens(logits.narrow(0, b, 1), uniform_noise(3, seq.narrow(0, b, 1), step.narrow(0, b, 1), 4),
                           p, true);
    EXPECT_TRUE(one.tokens.equal(all.tokens.narrow(0, b, 1)));
    EXPECT_TRUE(one.confidence.equal(all.confidence.narrow(0, b, 1)));
  }
}

TEST(Schedule, SpreadsTokensOverSteps) {
  EXPECT_EQ(transfer_count(4, 0, 4), 1);
  EXPECT_EQ(transfer_count(4, 3, 4), 1);
  EXPECT_EQ(transfer_count(8, 1, 4), 2);
  EXPECT_EQ(transfer_count(2, 0, 4), 1);
  EXPECT_EQ(transfer_count(2, 1, 4), 1);
  EXPECT_EQ(transfer_count(2, 2, 4), 0);
  EXPECT_EQ(transfer_count(5, 0, 2), 3);
  EXPECT_EQ(transfer_count(5, 1, 2), 2);
  EXPECT_EQ(transfer_count(3, 9, 2), 3);
  for (int64_t n = 0; n <= 9; ++n)
    for (int64_t steps = 1; steps <= 5; ++steps) {
      int64_t total = 0;
      for (int64_t s = 0; s < steps; ++s) total += transfer_count(n, s, steps);
      EXPECT_EQ(total, n);
    }
  auto t = transfer_count(i64({4, 8, 2, 5, 3}), i64({0, 1, 3, 1, 7}), 4);
  EXPECT_TRUE(t.equal(i64({1, 2, 0, 1, 3})));
}

TEST(Select, StaticTakesTheKMostConfidentMasked) {
  auto conf = torch::tensor({{0.9f, 0.1f, 0.5f, 0.7f}, {0.3f, 0.3f, 0.3f, 0.3f}});
  auto masked = torch::tensor({{false, true, true, true}, {true, true, true, true}});
  auto sel = select_unmask(conf, masked, i64({2, 1}), Strategy::kStatic, 0.9);
  EXPECT_TRUE(sel.equal(torch::tensor({{false, false, true, true}, {true, false, false, false}})));
}

TEST(Select, DynamicTakesAllAboveThresholdButNeverFewerThanK) {
  auto conf = torch::tensor({{0.95f, 0.99f, 0.2f, 0.91f}, {0.5f, 0.6f, 0.1f, 0.2f}, {0.95f, 0.99f, 0.2f, 0.1f}});
  auto masked = torch::ones({3, 4}, torch::kBool);
  auto sel = select_unmask(conf, masked, i64({1, 2, 3}), Strategy::kDynamic, 0.9);
  EXPECT_TRUE(sel.equal(torch::tensor({{true, true, false, true},      // 3 above >= k 1
                                       {true, true, false, false},     // none above: top 2
                                       {true, true, true, false}})));  // 2 above < k 3: top 3
}

TEST(Select, SequentialGoesLeftToRight) {
  auto conf = torch::tensor({{0.1f, 0.9f, 0.9f, 0.9f}});
  auto masked = torch::tensor({{false, true, true, true}});
  auto sel = select_unmask(conf, masked, i64({2}), Strategy::kSequential, 0.9);
  EXPECT_TRUE(sel.equal(torch::tensor({{false, true, true, false}})));
}

TEST(Select, RowsWithMasksAlwaysProgressAndUnmaskedAreNeverChosen) {
  torch::manual_seed(2);
  for (auto s : {Strategy::kStatic, Strategy::kDynamic, Strategy::kSequential}) {
    auto conf = torch::rand({64, 4});
    auto masked = torch::rand({64, 4}) < 0.6;
    auto sel = select_unmask(conf, masked, torch::zeros({64}, torch::kInt64), s, 0.9);
    EXPECT_FALSE((sel & masked.logical_not()).any().item<bool>());
    auto has = masked.any(1);
    EXPECT_TRUE((sel.any(1) == has).all().item<bool>()) << strategy_name(s);
  }
}

TEST(BlockStateTest, StaticBlockFourStepsUnmasksOnePerStepAndRecordsSteps) {
  torch::manual_seed(3);
  const int64_t B = 3, W = 4, mask = 99;
  auto st = BlockState::empty(B, W, mask, torch::kCPU);
  st.global_step = i64({10, 0, 5});
  auto active = torch::tensor({true, true, false});
  std::vector<torch::Tensor> snapshots;
  for (int step = 0; step < 4; ++step) {
    auto logits = torch::randn({B, W, 20});
    auto u = uniform_noise(1, i64({0, 1, 2}), st.global_step, W);
    auto before_tokens = st.tokens.clone();
    auto before_masked = st.masked.clone();
    auto d = draw_tokens(logits, u, SamplingParams{}, true);
    auto sel = apply_step(st, d, active, 4, Strategy::kStatic, 0.9);
    EXPECT_TRUE(sel.sum(1).equal(i64({1, 1, 0})));
    // unmasked positions never change
    auto kept = before_masked.logical_not();
    EXPECT_TRUE(st.tokens.masked_select(kept).equal(before_tokens.masked_select(kept)));
  }
  EXPECT_FALSE(st.masked.narrow(0, 0, 2).any().item<bool>());
  EXPECT_TRUE(st.masked[2].all().item<bool>());  // inactive row untouched
  EXPECT_TRUE(st.global_step.equal(i64({14, 4, 5})));
  EXPECT_TRUE(std::get<0>(st.unmask_step[0].sort()).equal(i64({10, 11, 12, 13})));
  EXPECT_TRUE(std::get<0>(st.unmask_step[1].sort()).equal(i64({0, 1, 2, 3})));
  EXPECT_TRUE((st.tokens.narrow(0, 0, 2) < 20).all().item<bool>());
  EXPECT_TRUE((st.logprob.narrow(0, 0, 2) < 0).all().item<bool>());
}

TEST(Strategy, ParsesNames) {
  EXPECT_EQ(parse_strategy("low_confidence_dynamic"), Strategy::kDynamic);
  EXPECT_EQ(parse_strategy("static"), Strategy::kStatic);
  EXPECT_THROW(parse_strategy("random"), dice::Error);
}
