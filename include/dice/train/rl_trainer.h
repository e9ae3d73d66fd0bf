#pragma once
// RlTrainer: `dice train` — BiC-RL over learner and actor ranks (DESIGN §2).
//
// Per step: the curriculum picks the tasks (every rank, no message), actors sample, score and
// compute advantages (ActorLoop), kept rollouts travel to learners (Comm send/recv, round-robin
// by kept index; colocated ranks keep their own), learners update (LearnerLoop), learner 0
// broadcasts the new weights in the actors' dtype into their parameters in place, and rank 0
// (learner 0) writes one metrics record and a progress line. Checkpoints every ckpt.every steps
// and at every stage end; --resume auto continues from the latest complete one.
//
// Setup refuses, before any work and with a sentence: roles that do not fit the world size,
// infill stages whose tasks lack splits, a tokenizer that does not match the model, a checkpoint
// of another shape, and a resume into a run directory recorded with a different config.
#include <string>
#include <vector>

#include "dice/dist/world.h"
#include "dice/train/rl_config.h"

namespace dice::train {

struct TrainResult {
  int64_t first_step = 1;            // the first step this invocation ran
  int64_t last_step = 0;
  std::vector<double> reward_mean;   // per step run here (rank 0)
  std::string last_checkpoint;
};

// `resume`: "auto" (latest complete checkpoint in cfg.out, if any), "never" (refuse a run
// directory that has checkpoints), or a checkpoint directory. `resolved_yaml`: the resolved
// config as text (saved and compared).
TrainResult run_train(const RlRunConfig& cfg, const std::string& resume, const std::string& resolved_yaml,
                      const dist::World& world);

}  // namespace dice::train
