#pragma once
// MasterWeights: the weights a learner trains, shared by the RL learner (LearnerLoop) and SFT.
//   - the fp32 master weights, whose gradients are views of one flat fp32 buffer (one all-reduce,
//     one clip for the whole model);
//   - a copy in the compute dtype when that differs (forward and backward run on it; its gradients,
//     one buffer of their own, are added into the fp32 one after each micro-batch);
//   - AdamW over the master, ZeRO-1 when sharded (each learner updates what it owns, then every
//     parameter is broadcast from its owner).
// The drivers call these in the order of their step: zero_grads, refresh_compute, (backward,
// accumulate) per micro-batch, all_reduce, clip, step.
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/ckpt/checkpoint.h"
#include "dice/dist/comm.h"
#include "dice/model/transformer.h"
#include "dice/train/adamw.h"

namespace dice::train {

struct MasterWeightsOptions {
  torch::Dtype compute_dtype = torch::kFloat32;  // forward/backward dtype (a copy when not the master's)
  bool optimizer = true;                         // false: no AdamW state (bench: forward/backward only)
  AdamWOptions adam;
  bool zero1 = false;
  int shard = 0, shards = 1;  // this learner's ZeRO-1 shard of `shards` (0 of 1 without ZeRO-1)
};

class MasterWeights {
 public:
  using Options = MasterWeightsOptions;
  MasterWeights(model::Transformer master, const Options& o);

  model::Transformer& master() { return master_; }
  const model::Transformer& master() const { return master_; }
  model::Transformer& compute_model() { return compute_ ? *compute_ : master_; }
  const std::vector<torch::Tensor>& params() const { return params_; }  // named_parameters() order
  bool has_optimizer() const { return adam_ != nullptr; }
  AdamW& optimizer() { return *adam_; }

  // Both gradient buffers zeroed, every gradient a view of its buffer again.
  void zero_grads();
  // The compute copy takes the master's values (after an update, a checkpoint load, a broadcast).
  void refresh_compute();
  // After a micro-batch's backward: the compute copy's gradients added into the fp32 buffer.
  void accumulate();
  // The fp32 gradients summed over `comm` (nothing to do on one rank).
  void all_reduce(dist::Comm& comm);
  // The gradients' global L2 norm before clipping to max_norm (when > 0).
  double clip(double max_norm);
  // One AdamW update at `lr`; with ZeRO-1, every parameter then leaves its owner over `comm`.
  void step(double lr, dist::Comm& comm, int64_t bucket_bytes);
  // This learner's part of a checkpoint (ckpt::save_checkpoint's protocol): the leader writes the
  // master (fp32); the optimizer state comes from every learner with ZeRO-1 (its shard), else from
  // the leader (every learner holds the same). Returns the checkpoint directory.
  std::string save_checkpoint(const std::string& run_dir, const ckpt::TrainState& ts, const ckpt::SaveOptions& so);

 private:
  model::Transformer master_;
  std::vector<torch::Tensor> params_;
  torch::Tensor grad_flat_;                    // fp32: every master gradient is a view of it
  std::optional<model::Transformer> compute_;  // the compute-dtype copy (when it differs)
  std::vector<torch::Tensor> compute_params_;
  torch::Tensor compute_grad_flat_;            // its gradients, one buffer in the compute dtype
  std::unique_ptr<AdamW> adam_;
  bool zero1_ = false;
};

// The options of a learner group's checkpoint, as RL and SFT write theirs: `rank` names this
// learner's optimizer shard, the leader writes the model, the newest keep_last stay, the starting
// model's side files (tokenizer, remote code) are copied beside, and `group` is the barrier.
ckpt::SaveOptions learner_save_options(dist::Comm& group, int rank, bool leader, int keep_last,
                                       const std::string& model_dir, const std::vector<std::string>& side_files);

}  // namespace dice::train
