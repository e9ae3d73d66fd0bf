#pragma once
// The run config of `dice train` (BiC-RL): one typed tree, loaded from YAML with --set overrides,
// validated once, saved into the run directory and every checkpoint.
//
//   model: models/tiny            # HF folder or checkpoint dir (step_N/) to start from
//   out: runs/x
//   stages:                       # run in order; steps are counted globally across stages
//     - {name: infill, kind: infill, steps: 20, tasks: stage1.jsonl, max_prompt_len: 2000}
//     - {name: e2e, kind: end_to_end, steps: 100, tasks: stage2.jsonl, max_prompt_len: 1500}
//   rollout: {tasks_per_step: 64, group_size: 16, curriculum: sequential}
//   sampler: {...}  judge: {...}  reward: {kind: exec}  trace: {...}  loss: {...}  optim: {...}
//   dist: {colocated: true, num_learners: 0, timeout_s: 600}
//   ckpt: {every: 10, keep_last: 3}
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dice/judge/judge.h"
#include "dice/rl/loss.h"
#include "dice/rl/synthetic_reward.h"
#include "dice/rollout/sampler.h"

namespace dice::train {

struct StageConfig {
  std::string name = "e2e";
  std::string kind = "end_to_end";  // infill (stage 1: prefix + suffix given) | end_to_end (stage 2)
  int64_t steps = 1;
  std::string tasks;                // task JSONL, in curriculum order
  int64_t max_prompt_len = 1500;    // longer prompts are dropped (whole groups) and counted
  std::string prompt_template;      // "" = configs/prompts default for the kind and task device
  std::string answer = "file";      // infill: file (the whole file, DICE) | middle (only the gap; task_prompt.h)
  double temperature = 0;           // sampling temperature of this stage; 0 = sampler.temperature

  template <class V> void visit(V& v) {
    v("name", name, "stage name (checkpoints record it)");
    v.choice("kind", kind, {"infill", "end_to_end"}, "prompt kind");
    v.choice("answer", answer, {"file", "middle"},
             "what an infill answer is: file (the whole file in a code block, DICE) or middle (only the code "
             "between prefix and suffix; the judge gets prefix + answer + suffix)");
    v("steps", steps, "RL steps of this stage");
    v("tasks", tasks, "task JSONL file (its order is the curriculum)");
    v("max_prompt_len", max_prompt_len, "prompts longer than this many tokens are dropped");
    v("prompt_template", prompt_template, "prompt template file");
    v("temperature", temperature,
      "sampling temperature of this stage (0 = sampler.temperature); the learner scores log-probs at the same "
      "temperature, so the update stays on-policy");
  }
  void validate() const;
};

struct RolloutConfig {
  int64_t tasks_per_step = 64;
  int64_t group_size = 16;
  std::string curriculum = "sequential";
  bool write_rollouts = true;  // rollouts/step_N.jsonl on rank 0 (tokens, step maps, rewards)

  template <class V> void visit(V& v) {
    v("tasks_per_step", tasks_per_step, "tasks drawn per RL step");
    v("group_size", group_size, "samples per task (rewards are z-scored within the group)");
    v.choice("curriculum", curriculum, {"sequential", "shuffled"}, "task order");
    v("write_rollouts", write_rollouts, "write every step's samples to rollouts/step_N.jsonl");
  }
  void validate() const;
};

struct RewardConfig {
  std::string kind = "exec";  // exec | speedup | graded (the judge) | synthetic_token_share (no judge)
  rl::TokenShareReward synthetic;

  template <class V> void visit(V& v) {
    v.choice("kind", kind, {"exec", "speedup", "graded", "synthetic_token_share"},
             "reward: the judge's (exec/speedup/graded) or the synthetic token share (smoke tests)");
    v("synthetic", synthetic, "synthetic_token_share settings");
  }
  bool synthetic_kind() const { return kind == "synthetic_token_share"; }
};

struct TraceConfig {
  std::string layout = "packed";
  int64_t shrink = 1;

  template <class V> void visit(V& v) {
    v.choice("layout", layout, {"packed", "reference"}, "TraceRL row layout");
    v("shrink", shrink, "merge this many consecutive denoising steps of a block into one round");
  }
};

struct OptimConfig {
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;              // <= 0: off
  int64_t responses_per_update = 64;   // responses (all learners) per optimizer update
  int64_t micro_batch_tokens = 16384;  // padded row tokens per forward/backward
  bool zero1 = false;                  // shard the AdamW state across learners
  std::string compute_dtype = "auto";  // forward/backward dtype: auto (bf16 on CUDA) | float32 | bfloat16
  int64_t checkpoint_layers = 0;       // layers (from the first) with activation checkpointing; -1 = all
  // the learner's scoring (rl::ScoreOptions), spelt as dice sft spells it (optim.fast, ...)
  bool fast = true;            // sparse attention + chunked log-probs (false: the plain path)
  int64_t attn_chunk = 256;    // clean tokens per sparse-attention chunk
  int64_t logit_chunk = 2048;  // targets per lm_head / log-softmax chunk

  template <class V> void visit(V& v) {
    v("lr", lr, "AdamW learning rate (constant)");
    v("beta1", beta1, "AdamW beta1");
    v("beta2", beta2, "AdamW beta2");
    v("eps", eps, "AdamW epsilon");
    v("weight_decay", weight_decay, "AdamW decoupled weight decay");
    v("grad_clip", grad_clip, "global gradient-norm clip (<= 0: off)");
    v("responses_per_update", responses_per_update, "responses per optimizer update, over all learners");
    v("micro_batch_tokens", micro_batch_tokens, "padded row tokens per forward/backward");
    v("zero1", zero1, "shard optimizer state across learners (ZeRO-1)");
    v.choice("compute_dtype", compute_dtype, {"auto", "float32", "bfloat16"},
             "learner forward/backward dtype (fp32 master weights, gradients and AdamW always); auto: bf16 on CUDA");
    v("checkpoint_layers", checkpoint_layers,
      "activation checkpointing of this many layers from the first (-1: all): their forward is recomputed in backward");
    v("fast", fast, "learner scoring without N x N masks or full-vocabulary logits (false: the plain path)");
    v("attn_chunk", attn_chunk, "fast path: clean tokens per block-sparse attention chunk");
    v("logit_chunk", logit_chunk, "fast path: targets per chunk of lm_head + log-softmax");
  }
  void validate() const;
};

struct DistConfig {
  bool colocated = true;
  int num_learners = 0;
  double timeout_s = 600;
  bool checksum_weights = true;  // learner and actor weight checksums in every metrics record
  int64_t bucket_mb = 64;

  template <class V> void visit(V& v) {
    v("colocated", colocated, "every rank is learner and actor (phases alternate)");
    v("num_learners", num_learners, "learner ranks when not colocated (the first ranks); the rest are actors");
    v("timeout_s", timeout_s,
      "a collective or control wait longer than this aborts the job (must outlast the longest phase: "
      "actors wait in the weight broadcast while learners update)");
    v("checksum_weights", checksum_weights, "record weight checksums of every rank each step");
    v("bucket_mb", bucket_mb, "bucket size of gradient all-reduce and weight broadcast");
  }
};

struct CkptConfig {
  int64_t every = 10;
  bool stage_end = true;  // also at the end of every stage
  int keep_last = 3;

  template <class V> void visit(V& v) {
    v("every", every, "checkpoint every K steps");
    v("stage_end", stage_end, "also checkpoint at the end of every stage");
    v("keep_last", keep_last, "keep the newest K checkpoints (0: all)");
  }
};

struct FaultConfig {  // fault injection for tests
  int64_t kill_at_step = -1;
  std::string signal = "kill";  // kill (a dead rank) | stop (a stuck rank: SIGSTOP)
  int rank = 0;
  std::string once_file;

  template <class V> void visit(V& v) {
    v("kill_at_step", kill_at_step, "test only: signal rank `rank` at the start of this step, once every rank has finished the one before");
    v.choice("signal", signal, {"kill", "stop"}, "test only: SIGKILL (dead rank) or SIGSTOP (stuck rank)");
    v("rank", rank, "test only: the rank to kill");
    v("once_file", once_file, "test only: kill only if this file does not exist (it is created first)");
  }
};

// The policy evaluated between steps (DICE evaluates every 10 steps): the actor ranks sample
// `samples` responses per task of `tasks` with the training sampler (its settings and temperature)
// and judge them with the kernel judge's correctness reward, whatever reward trains the policy.
struct TrainEvalConfig {
  int64_t every = 0;  // evaluate after every K-th step (0: never)
  std::string tasks;  // task JSONL
  int64_t samples = 1;
  int64_t max_tasks = 0;  // the first N tasks of the file (0: all)
  std::string kind = "end_to_end";
  std::string answer = "file";  // as stages[].answer
  std::string prompt_template;
  int64_t max_prompt_len = 4096;
  template <class V> void visit(V& v) {
    v("every", every, "evaluate the policy after every K-th step (0: never); metrics eval_* at those steps");
    v("tasks", tasks, "task JSONL file of the evaluation");
    v("samples", samples, "samples per task");
    v("max_tasks", max_tasks, "evaluate the first N tasks of the file (0: all)");
    v.choice("kind", kind, {"infill", "end_to_end"}, "prompt kind");
    v.choice("answer", answer, {"file", "middle"}, "what an infill answer is (as stages[].answer)");
    v("prompt_template", prompt_template, "prompt template file (empty: the default for the kind and device)");
    v("max_prompt_len", max_prompt_len, "prompts longer than this many tokens are not sampled (counted as failed)");
  }
  void validate() const;
};

struct RlRunConfig {
  std::string model;
  std::string out = "runs/train";
  std::string device = "auto";
  std::vector<StageConfig> stages;
  RolloutConfig rollout;
  rollout::SamplerConfig sampler = default_sampler();
  RewardConfig reward;
  judge::JudgeConfig judge;
  TraceConfig trace;
  rl::LossConfig loss;
  OptimConfig optim;
  DistConfig dist;
  CkptConfig ckpt;
  TrainEvalConfig eval;
  FaultConfig fault;

  // DICE's rollout settings: dynamic unmasking at 0.9, temperature 1, no truncation, log-probs.
  static rollout::SamplerConfig default_sampler();
  template <class V> void visit(V& v) {
    v("model", model, "HF folder or checkpoint to start from");
    v("out", out, "run directory (checkpoints, metrics.jsonl, rollouts)");
    v.choice("device", device, {"auto", "cpu", "cuda"}, "model device");
    v("stages", stages, "BiC-RL stages, in order");
    v("rollout", rollout, "tasks and samples per step");
    v("sampler", sampler, "block-diffusion sampler");
    v("reward", reward, "reward function");
    v("judge", judge, "kernel judge");
    v("trace", trace, "TraceRL rows");
    v("loss", loss, "policy loss");
    v("optim", optim, "optimizer");
    v("dist", dist, "ranks and communication");
    v("ckpt", ckpt, "checkpoints");
    v("eval", eval, "evaluation of the policy between steps");
    v("fault", fault, "fault injection (tests)");
  }
  void validate() const;
  int64_t total_steps() const;
  // The temperature a stage samples and the learner scores at.
  double temperature_of(const StageConfig& s) const { return s.temperature > 0 ? s.temperature : sampler.temperature; }
};

// Keys whose change does not change results (paths of caches, timeouts, logging, fault
// injection, keep_last): a resumed run may differ from the recorded config only in these.
bool key_affects_results(const std::string& dotted_key);
// Judge and sampler keys that change only speed or where scratch goes, never a result (shared by
// the trainer's and eval's run-directory fingerprints).
bool runtime_only_key(const std::string& dotted_key);
// Dotted keys whose values differ between two resolved config trees (YAML text), sorted; a key of
// an earlier release (renamed_keys) counts as its new name.
std::vector<std::string> config_differences(const std::string& a_yaml, const std::string& b_yaml);
// Keys of `dice train` that earlier releases spelt otherwise: {old, new}. A config that uses an old
// name is refused with the new one (dice train); a run directory recorded with it resumes.
const std::vector<std::pair<std::string, std::string>>& renamed_keys();

}  // namespace dice::train
