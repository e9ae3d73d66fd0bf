// The TraceRL loss and its gradient against a hand computation; advantages, curriculum and the
// synthetic reward against values worked out by hand.
#include "dice/rl/loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "dice/rl/advantage.h"
#include "dice/rl/curriculum.h"
#include "dice/rl/synthetic_reward.h"
#include "dice/util/error.h"

namespace dice::rl {
namespace {

TEST(Loss, MatchesHandComputedValueAndGradient) {
  // Five tokens: ratio inside the clip range (A > 0 and A < 0), above it with A > 0 (clipped),
  // below it with A < 0 (clipped), and one beyond the log-ratio clamp.
  std::vector<double> nw = {-1.0, -2.0, -0.5, -3.0, 5.0}, od = {-1.1, -1.9, -1.0, -2.0, -8.0},
                      adv = {1.5, -0.7, 2.0, -1.0, 0.3}, w = {0.1, 0.2, 0.3, 0.25, 0.15};
  LossConfig cfg;  // eps 0.2, beta 0.01, clamp 10
  auto t = [](const std::vector<double>& v) { return torch::tensor(v, torch::kFloat64); };
  auto logp_new = t(nw).requires_grad_(true);
  auto out = tracerl_loss(logp_new, t(od), torch::Tensor(), t(adv), t(w), cfg);
  out.loss.backward();
  double want = 0, want_policy = 0;
  int64_t want_clipped = 0;
  for (size_t j = 0; j < nw.size(); ++j) {
    const double raw = nw[j] - od[j], d = std::clamp(raw, -10.0, 10.0), r = std::exp(d);
    const double rc = std::clamp(r, 0.8, 1.2);
    const bool use_clipped = rc * adv[j] < r * adv[j];
    const double policy = -std::min(r * adv[j], rc * adv[j]);
    const double kl = std::exp(-d) - 1 + d;
    want += w[j] * (policy + 0.01 * kl);
    want_policy += w[j] * policy;
    want_clipped += use_clipped;
    // d/dnew: the policy term has -A r where it is unclipped; the KL term 1 - exp(-d); both vanish
    // where the clamp is active.
    const bool clamped = raw != d;
    const double g = clamped ? 0.0 : w[j] * ((use_clipped ? 0.0 : -adv[j] * r) + 0.01 * (1 - std::exp(-d)));
    EXPECT_NEAR(logp_new.grad()[static_cast<int64_t>(j)].item<double>(), g, 1e-12) << "token " << j;
  }
  EXPECT_NEAR(out.loss.item<double>(), want, 1e-12);
  EXPECT_NEAR(out.policy_sum, want_policy, 1e-12);
  EXPECT_EQ(out.clipped, want_clipped);
  EXPECT_EQ(want_clipped, 3);  // tokens 2, 3 and the clamped 4
}

TEST(Loss, UnchangedPolicyGivesMinusWeightedAdvantageAndZeroKl) {
  auto lp = torch::tensor({-1.0, -2.0, -3.0}, torch::kFloat64);
  auto adv = torch::tensor({1.0, -2.0, 0.5}, torch::kFloat64), w = torch::tensor({0.5, 0.25, 1.0}, torch::kFloat64);
  auto out = tracerl_loss(lp.clone().requires_grad_(true), lp, torch::Tensor(), adv, w, LossConfig{});
  EXPECT_NEAR(out.loss.item<double>(), -(0.5 - 0.5 + 0.5), 1e-12);
  EXPECT_NEAR(out.kl_sum, 0.0, 1e-15);
}

TEST(Loss, FrozenReferenceEntersOnlyTheKl) {
  auto lp = torch::tensor({-1.0}, torch::kFloat64), ref = torch::tensor({-1.5}, torch::kFloat64);
  auto one = torch::tensor({1.0}, torch::kFloat64), zero = torch::tensor({0.0}, torch::kFloat64);
  auto out = tracerl_loss(lp.clone().requires_grad_(true), lp, ref, zero, one, LossConfig{});
  EXPECT_NEAR(out.kl_sum, std::exp(-0.5) - 1 + 0.5, 1e-12);
}

TEST(Advantages, PopulationZScoreAndDroppedGroups) {
  auto a = group_advantages({1, 0, 0, 1, 1, 1, 1, 1, 0.5, 0.0, 1.0, 0.5}, 4);
  EXPECT_EQ(a.groups, 3);
  EXPECT_EQ(a.zero_variance_groups, 1);
  // Group 0: mean 0.5, population std 0.5.
  EXPECT_DOUBLE_EQ(a.advantage[0], 1.0);
  EXPECT_DOUBLE_EQ(a.advantage[1], -1.0);
  EXPECT_FALSE(a.keep[4]);
  EXPECT_DOUBLE_EQ(a.advantage[5], 0.0);
  // Group 2: mean 0.5, std sqrt(0.125).
  EXPECT_NEAR(a.advantage[9], -0.5 / std::sqrt(0.125), 1e-15);
  EXPECT_THROW(group_advantages({1, 2, 3}, 2), Error);
}

TEST(Curriculum, SequentialWrapsAround) {
  Curriculum c(5, 3);
  EXPECT_EQ(c.tasks_at(0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(c.tasks_at(3), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_EQ(c.tasks_at(6), (std::vector<int64_t>{1, 2, 3}));
}

TEST(Curriculum, ShuffledIsAPermutationPerPassAndReproducible) {
  Curriculum c(7, 7, "shuffled", 42), d(7, 7, "shuffled", 42), e(7, 7, "shuffled", 43);
  auto p0 = c.tasks_at(0), p1 = c.tasks_at(7);
  EXPECT_EQ(std::set<int64_t>(p0.begin(), p0.end()).size(), 7u);
  EXPECT_NE(p0, p1);
  EXPECT_EQ(p0, d.tasks_at(0));
  EXPECT_NE(p0, e.tasks_at(0));
  EXPECT_THROW(Curriculum(7, 1, "random"), Error);
}

TEST(SyntheticReward, ShareOfTokensInRangesWithoutStops) {
  TokenShareReward r;
  r.ranges = {{0, 10}, {100, 200}};
  EXPECT_DOUBLE_EQ(r({1, 150, 50, 9, 151645}, {151645}), 0.75);
  EXPECT_DOUBLE_EQ(r({}, {151645}), 0.0);
}

}  // namespace
}  // namespace dice::rl
