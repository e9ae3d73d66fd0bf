#pragma once
// ActorLoop: one RL step of an actor rank (DESIGN §2) — sample the step's groups, score them
// (the kernel judge, or the synthetic reward), all-gather the rewards over the actors, compute
// group advantages, and hand back this actor's samples.
//
// The step's samples are task_slot * group_size + member; actor a of A samples the contiguous
// shard_range(N, a, A), so a group may span two actors. Rewards are all-gathered, so every actor
// computes the advantages of every group from the same numbers: exactly the single-actor result.
// Sample s of step t uses the sampler's noise stream t * N + s.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dice/dist/comm.h"
#include "dice/judge/judge.h"
#include "dice/judge/judge_queue.h"
#include "dice/judge/task.h"
#include "dice/model/transformer.h"
#include "dice/rollout/sampler.h"
#include "dice/text/tokenizer.h"
#include "dice/train/rl_config.h"
#include "dice/train/rollout_batch.h"

namespace dice::train {

// A stage's tasks with their prompts tokenized once.
struct StageData {
  StageConfig cfg;
  std::vector<judge::Task> tasks;
  std::vector<std::vector<int64_t>> prompt_ids;  // per task (chat-framed)
  std::vector<std::string> prompts;              // the user text, per task
  int64_t too_long = 0;                          // tasks whose prompt exceeds max_prompt_len
};
// Loads the task file and renders every prompt. Refuses (dice::Error with a sentence) an infill
// stage whose tasks lack infill splits, an empty task file, and a stage whose every prompt is too long.
StageData load_stage(const StageConfig& cfg, const text::Tokenizer& tok);

struct ActorOutput {
  std::vector<Rollout> mine;  // this actor's samples (kept and dropped), in sample order
  nlohmann::json metrics;     // this actor's share (summed over actors by the trainer)
  // With rollout.write_rollouts, per sample of `mine`: the response text, the code the judge took
  // from it and its verdict (failure class, reward, speedup), for rollouts/step_N.jsonl.
  std::vector<nlohmann::json> details;
};

class ActorLoop {
 public:
  ActorLoop(const RlRunConfig& cfg, model::Transformer policy, const text::Tokenizer& tok, dist::Comm& actors);
  ActorOutput step(const StageData& stage, const std::vector<int64_t>& task_slots, int64_t step);
  // The policy's evaluation after `step`: this actor's share of tasks x samples sampled (noise
  // streams apart from training's) and judged for correctness. {samples, correct, compiled, fast_1,
  // failures: {class: n}} of this actor's share, summed over actors by the trainer.
  nlohmann::json evaluate(const StageData& tasks, int64_t samples, int64_t step);
  model::Transformer& policy() { return policy_; }
  void release() { sampler_->release(); }  // frees the KV cache (colocated: before the update)

 private:
  std::string decode(const std::vector<int64_t>& response) const;  // the answer's text
  // What the judge gets for one answer to a prompt of stage `st` (task_prompt.h: candidate_job).
  judge::Job job_for(const StageData& st, const judge::Task& task, const std::vector<int64_t>& response) const;
  std::vector<double> synthetic_rewards(const std::vector<Rollout>& rs) const;
  // verdicts (optional): each judged sample's verdict, by its index among this actor's samples
  std::vector<double> judge_rewards(judge::JudgeQueue& queue, int64_t first, size_t n, nlohmann::json& m,
                                    std::map<int64_t, judge::Verdict>* verdicts);
  std::vector<double> gather_rewards(const std::vector<double>& mine, int64_t n);

  const RlRunConfig& cfg_;
  model::Transformer policy_;
  const text::Tokenizer& tok_;
  dist::Comm& comm_;
  std::unique_ptr<rollout::Sampler> sampler_;
  std::unique_ptr<judge::Judge> judge_;  // for judge rewards, and for eval.every (correctness)
};

}  // namespace dice::train
