#pragma once
// The TraceRL policy loss (recipe §4.6): PPO-clip plus beta * k3 KL, per target token.
//
//   delta_j = clamp(logp_new_j - logp_old_j, -c, c),  ratio_j = exp(delta_j)
//   policy_j = -min(ratio_j * A_j, clip(ratio_j, 1 - eps, 1 + eps) * A_j)
//   kl_j     = exp(-d_j) - 1 + d_j, d_j = clamp(logp_new_j - logp_ref_j, -c, c)   (k3; ref = old
//              policy, DICE's choice, or a frozen reference model)
//   loss     = sum_j w_j * (policy_j + beta * kl_j)
//
// The weights w_j carry the normalisation, chosen by the caller over the whole optimizer update
// (every learner, so the summed gradients do not depend on how responses are spread):
//   "padded_len"  w = 1 / (L1 * responses): DICE's token sum over the padded response length L1,
//                 averaged over responses (DICE averages over rows of rounds instead, a layout-
//                 dependent constant: here both layouts give the same loss);
//   "token_mean"  w = 1 / (targets in the update);
//   "seq_mean"    w = 1 / (targets of the response * responses).
#include <torch/types.h>

#include <string>

namespace dice::rl {

struct LossConfig {
  double clip_eps = 0.2;
  double kl_beta = 0.01;
  double log_ratio_clamp = 10.0;
  std::string norm = "padded_len";
  std::string kl_reference = "old";  // old | initial (a frozen copy of the starting policy)

  template <class V> void visit(V& v) {
    v("clip_eps", clip_eps, "PPO clip epsilon");
    v("kl_beta", kl_beta, "weight of the k3 KL term");
    v("log_ratio_clamp", log_ratio_clamp, "clamp of the log-ratio before exp");
    v.choice("norm", norm, {"padded_len", "token_mean", "seq_mean"}, "loss normalisation");
    v.choice("kl_reference", kl_reference, {"old", "initial"}, "KL against the pre-update policy or the initial one");
  }
  void validate() const;
};

struct LossOut {
  torch::Tensor loss;        // scalar, differentiable through logp_new
  double policy_sum = 0;     // sum_j w_j * policy_j
  double kl_sum = 0;         // sum_j w_j * kl_j
  double kl_token_sum = 0;   // sum_j kl_j (unweighted, for a per-token mean)
  int64_t clipped = 0;       // tokens whose ratio left [1 - eps, 1 + eps] on the side that clips
  int64_t tokens = 0;
};

// All inputs [N] on one device; logp_ref undefined = logp_old.
LossOut tracerl_loss(const torch::Tensor& logp_new, const torch::Tensor& logp_old, const torch::Tensor& logp_ref,
                     const torch::Tensor& advantage, const torch::Tensor& weight, const LossConfig& cfg);

}  // namespace dice::rl
