// PPO-clip + k3 KL over target tokens (see loss.h).
#include "dice/rl/loss.h"

#include <torch/torch.h>

#include "dice/util/error.h"

namespace dice::rl {

void LossConfig::validate() const {
  DICE_REQUIRE(clip_eps > 0 && clip_eps < 1, "loss.clip_eps must be in (0, 1), got ", clip_eps, ".");
  DICE_REQUIRE(kl_beta >= 0, "loss.kl_beta must be >= 0, got ", kl_beta, ".");
  DICE_REQUIRE(log_ratio_clamp > 0, "loss.log_ratio_clamp must be > 0, got ", log_ratio_clamp, ".");
}

LossOut tracerl_loss(const torch::Tensor& logp_new, const torch::Tensor& logp_old, const torch::Tensor& logp_ref,
                     const torch::Tensor& advantage, const torch::Tensor& weight, const LossConfig& cfg) {
  const int64_t n = logp_new.numel();
  DICE_REQUIRE(logp_old.numel() == n && advantage.numel() == n && weight.numel() == n &&
                   (!logp_ref.defined() || logp_ref.numel() == n),
               "tracerl_loss: inputs disagree on the number of tokens.");
  const double c = cfg.log_ratio_clamp;
  auto old = logp_old.detach().to(logp_new.dtype());
  auto delta = (logp_new - old).clamp(-c, c);
  auto ratio = delta.exp();
  auto adv = advantage.to(logp_new.dtype());
  auto unclipped = ratio * adv;
  auto clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * adv;
  auto policy = -torch::min(unclipped, clipped);
  auto d = logp_ref.defined() ? (logp_new - logp_ref.detach().to(logp_new.dtype())).clamp(-c, c) : delta;
  auto kl = (-d).exp() - 1 + d;
  auto w = weight.to(logp_new.dtype());
  LossOut out;
  out.loss = (w * (policy + cfg.kl_beta * kl)).sum();
  torch::NoGradGuard ng;
  out.policy_sum = (w * policy).sum().item<double>();
  out.kl_sum = (w * kl).sum().item<double>();
  out.kl_token_sum = kl.sum().item<double>();
  out.clipped = (clipped < unclipped).sum().item<int64_t>();  // min() took the clipped term
  out.tokens = n;
  return out;
}

}  // namespace dice::rl
