#pragma once
// Rollouts as they travel from actors to learners: one record per sample of the step, with the
// trajectory (prompt, response, step map, the final block's tail), the sampler's log-probs, the
// reward and the group advantage. pack/unpack turn a list into one int64 tensor (and back) so
// the rollout channel can move it with Comm::send / recv (NCCL on GPUs, MPI on CPUs).
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dice/rl/trace.h"

namespace dice::train {

struct Rollout {
  int64_t sample = 0;  // index in the step: task_slot * group_size + member
  int64_t kept = -1;   // index among the step's kept samples (decides learner and update); -1 = dropped
  int64_t task = 0;    // index into the stage's task list
  double reward = 0;
  rl::Trajectory traj;          // advantage inside
  std::vector<float> logprobs;  // the sampler's, per response token
  int64_t stop_token = 0;       // 1 when the response ended on a stop token
  bool sampled = true;          // false: the prompt was too long (not sent to learners)
};

torch::Tensor pack_rollouts(const std::vector<Rollout>& rollouts);
std::vector<Rollout> unpack_rollouts(const torch::Tensor& packed);

}  // namespace dice::train
