#pragma once
// LearnerLoop: one RL step of a learner rank (DESIGN §2) — TraceRL rows from the rollouts it
// received, old log-probs before any update, then the optimizer updates of the step. The first
// update takes its old log-probs from its own forward (LearnerOptions::reuse_first_forward); the
// no-grad pass scores only the later updates' rows (and the frozen reference's, when a KL term
// uses it). Metrics: old_logp_row_tokens / row_tokens say how much of the step the no-grad pass
// scored.
//
// The step's kept samples are numbered 0..K-1 (Rollout::kept); sample k belongs to update
// k / responses_per_update. Every learner runs every update (with zero gradients when it holds
// none of its samples): the loss normalisers are summed over learners first, gradients are summed
// over learners, so the update does not depend on how samples were spread over learners (up to the
// order of floating-point sums).
//
// Precision (MasterWeights): the master weights, their gradients (one contiguous fp32 buffer,
// all-reduced in one call) and AdamW are fp32; forward and backward run in optim.compute_dtype
// (auto: bf16 on CUDA) on a copy of the weights refreshed after every update, whose gradients are
// added into the fp32 buffer after each micro-batch. Scoring follows optim.fast (rl::ScoreOptions).
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "dice/dist/comm.h"
#include "dice/model/transformer.h"
#include "dice/rl/trace.h"
#include "dice/train/adamw.h"
#include "dice/train/master_weights.h"
#include "dice/train/rl_config.h"
#include "dice/train/rollout_batch.h"

namespace dice::train {

// Bench knobs of a LearnerLoop (the trainer uses the defaults).
struct LearnerOptions {
  bool sync_timing = false;  // synchronise the device around timed phases (exact per-phase times)
  bool optimizer = true;     // false: no AdamW state and no update (forward/backward memory only)
  // The first update's old log-probs are its own forward's, detached (no optimizer step has
  // happened yet in the step, so they are the same numbers): its micro-batches skip the no-grad
  // pass. false: every micro-batch is scored twice (the definition the tests compare with).
  bool reuse_first_forward = true;
  // > 1: this learner holds the AdamW state of ZeRO-1's first shard of `zero1_of` and updates only
  // those parameters, without a communicator of that size (the others would broadcast theirs): the
  // memory of rank 0 of `zero1_of` learners, measured on one device (`dice bench learner --zero1-of`).
  int zero1_of = 0;
};

class LearnerLoop {
 public:
  using Options = LearnerOptions;
  // `reference`: a frozen copy of the starting policy, needed when loss.kl_reference is "initial".
  LearnerLoop(const RlRunConfig& cfg, model::Transformer master, dist::Comm& learners,
              std::optional<model::Transformer> reference = std::nullopt, Options opts = {});
  // `temperature`: the one the rollouts were sampled at (their stage's, RlRunConfig::temperature_of;
  // 0 = sampler.temperature); log-probs are scored at it.
  nlohmann::json step(const std::vector<Rollout>& mine, double temperature = 0);

  model::Transformer& model() { return weights_.master(); }
  const model::Transformer& model() const { return weights_.master(); }
  AdamW& optimizer() { return weights_.optimizer(); }
  MasterWeights& weights() { return weights_; }
  std::vector<torch::Tensor> params() const { return weights_.params(); }
  // The model forward/backward run on: the master itself when compute_dtype is its dtype.
  model::Transformer& compute_model() { return weights_.compute_model(); }
  const rl::ScoreOptions& scoring() const { return score_; }
  // Bench: the fast path with or without the fused training operators (ScoreOptions::fused).
  void set_fused(bool on) { score_.fused = on; }

 private:
  struct Item;
  struct MicroBatch;
  std::vector<MicroBatch> micro_batches(const std::vector<Item>& items, int64_t update) const;
  struct Gap;
  struct UpdateSums;
  void run_update(std::vector<MicroBatch>& mbs, const std::vector<std::vector<rl::TraceRow>>& rows_of_item,
                  const std::vector<Item>& items, int64_t L1, int64_t responses, double targets,
                  UpdateSums& sums, bool own_old, Gap& gap);
  void sync_device() const;

  const RlRunConfig& cfg_;
  MasterWeights weights_;
  dist::Comm& comm_;
  std::optional<model::Transformer> reference_;
  Options opts_;
  rl::ScoreOptions score_;
  double time_optimizer_ = 0, time_allreduce_ = 0, time_backward_ = 0;
};

}  // namespace dice::train
