#pragma once
// LearnerLoop: one RL step of a learner rank (DESIGN §2) — TraceRL rows from the rollouts it
// received, old log-probs before any update, then the optimizer updates of the step.
//
// The step's kept samples are numbered 0..K-1 (Rollout::kept); sample k belongs to update
// k / responses_per_update. Every learner runs every update (with zero gradients when it holds
// none of its samples): the loss normalisers are summed over learners first, gradients are summed
// over learners, so the update does not depend on how samples were spread over learners (up to the
// order of floating-point sums).
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "dice/dist/comm.h"
#include "dice/model/transformer.h"
#include "dice/rl/trace.h"
#include "dice/train/adamw.h"
#include "dice/train/rl_config.h"
#include "dice/train/rollout_batch.h"

namespace dice::train {

class LearnerLoop {
 public:
  // `reference`: a frozen copy of the starting policy, needed when loss.kl_reference is "initial".
  LearnerLoop(const RlRunConfig& cfg, model::Transformer master, dist::Comm& learners,
              std::optional<model::Transformer> reference = std::nullopt);
  nlohmann::json step(const std::vector<Rollout>& mine);

  model::Transformer& model() { return model_; }
  AdamW& optimizer() { return *adam_; }
  std::vector<torch::Tensor> params() const;

 private:
  struct Item;
  struct MicroBatch;
  std::vector<MicroBatch> micro_batches(const std::vector<Item>& items, int64_t update) const;
  void run_update(std::vector<MicroBatch>& mbs, const std::vector<std::vector<rl::TraceRow>>& rows_of_item,
                  const std::vector<Item>& items, int64_t L1, int64_t responses, double targets,
                  std::vector<double>& acc);
  void sync_zero1();

  const RlRunConfig& cfg_;
  model::Transformer model_;
  dist::Comm& comm_;
  std::optional<model::Transformer> reference_;
  std::unique_ptr<AdamW> adam_;
};

}  // namespace dice::train
