// Validation and config comparison of `dice train` runs.
#include "dice/train/rl_config.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "dice/config/config.h"
#include "dice/util/error.h"

namespace dice::train {

void StageConfig::validate() const {
  DICE_REQUIRE(!name.empty(), "Every stage needs a name.");
  DICE_REQUIRE(steps >= 1, "stage '", name, "' has steps ", steps, "; it needs at least 1.");
  DICE_REQUIRE(!tasks.empty(), "stage '", name, "' names no task file (stages[].tasks).");
  DICE_REQUIRE(max_prompt_len >= 1, "stage '", name, "' has max_prompt_len ", max_prompt_len, ".");
  DICE_REQUIRE(answer == "file" || kind == "infill", "stage '", name, "' has answer: ", answer,
               ", which only an infill stage can have (kind: infill).");
  DICE_REQUIRE(temperature >= 0, "stage '", name, "' has temperature ", temperature,
               "; it must be > 0, or 0 for sampler.temperature.");
}

void RolloutConfig::validate() const {
  DICE_REQUIRE(tasks_per_step >= 1, "rollout.tasks_per_step must be >= 1, got ", tasks_per_step, ".");
  DICE_REQUIRE(group_size >= 2, "rollout.group_size must be >= 2 (advantages are z-scores within a group), got ",
               group_size, ".");
}

void OptimConfig::validate() const {
  DICE_REQUIRE(lr > 0, "optim.lr must be > 0, got ", lr, ".");
  DICE_REQUIRE(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "optim.beta1 and optim.beta2 must be in [0, 1).");
  DICE_REQUIRE(eps > 0, "optim.eps must be > 0, got ", eps, ".");
  DICE_REQUIRE(responses_per_update >= 1, "optim.responses_per_update must be >= 1, got ", responses_per_update, ".");
  DICE_REQUIRE(micro_batch_tokens >= 1, "optim.micro_batch_tokens must be >= 1, got ", micro_batch_tokens, ".");
}

rollout::SamplerConfig RlRunConfig::default_sampler() {
  rollout::SamplerConfig s;
  s.steps = 4;
  s.strategy = "dynamic";
  s.threshold = 0.9;
  s.temperature = 1.0;
  s.top_k = 0;
  s.top_p = 1.0;
  s.record_logprobs = true;
  return s;
}

void TrainEvalConfig::validate() const {
  DICE_REQUIRE(every >= 0, "eval.every must be >= 0 (0: no evaluation), got ", every, ".");
  if (every == 0) return;
  DICE_REQUIRE(!tasks.empty(), "eval.every is ", every, " but eval.tasks names no task file.");
  DICE_REQUIRE(samples >= 1, "eval.samples must be >= 1, got ", samples, ".");
  DICE_REQUIRE(max_tasks >= 0, "eval.max_tasks must be >= 0 (0: all), got ", max_tasks, ".");
  DICE_REQUIRE(max_prompt_len >= 1, "eval.max_prompt_len must be >= 1, got ", max_prompt_len, ".");
  DICE_REQUIRE(answer == "file" || kind == "infill", "eval.answer is ", answer,
               ", which only an infill evaluation can have (eval.kind: infill).");
}

void RlRunConfig::validate() const {
  DICE_REQUIRE(!model.empty(), "dice train needs a model to start from (model: an HF folder or a checkpoint).");
  DICE_REQUIRE(!out.empty(), "dice train needs a run directory (out).");
  DICE_REQUIRE(!stages.empty(), "dice train needs at least one stage (stages: [{name, kind, steps, tasks}]).");
  std::set<std::string> names;
  for (const auto& s : stages)
    DICE_REQUIRE(names.insert(s.name).second, "Two stages are named '", s.name, "'; stage names must be unique.");
  DICE_REQUIRE(ckpt.every >= 1, "ckpt.every must be >= 1, got ", ckpt.every, ".");
  DICE_REQUIRE(trace.shrink >= 1, "trace.shrink must be >= 1, got ", trace.shrink, ".");
  DICE_REQUIRE(optim.attn_chunk >= 1 && optim.logit_chunk >= 1, "optim.attn_chunk and optim.logit_chunk must be >= 1, got ",
               optim.attn_chunk, " and ", optim.logit_chunk, ".");
  DICE_REQUIRE(dist.bucket_mb >= 1, "dist.bucket_mb must be >= 1, got ", dist.bucket_mb, ".");
  DICE_REQUIRE(sampler.temperature > 0,
               "sampler.temperature must be > 0 for RL (a greedy policy has no log-probs to optimise).");
  eval.validate();
}

int64_t RlRunConfig::total_steps() const {
  int64_t n = 0;
  for (const auto& s : stages) n += s.steps;
  return n;
}

bool key_affects_results(const std::string& k) {
  static const std::vector<std::string> neutral = {
      "out", "fault.", "dist.timeout_s", "dist.checksum_weights", "dist.bucket_mb", "ckpt.keep_last",
      "rollout.write_rollouts", "ckpt.every", "ckpt.stage_end", "optim.checkpoint_layers"};
  for (const auto& n : neutral)
    if (k == n || (n.back() == '.' && k.rfind(n, 0) == 0)) return false;
  return !runtime_only_key(k);
}

bool runtime_only_key(const std::string& k) {
  // Not sampler.check_every: how often finished rows are retired changes which rows share a
  // forward pass, and so the samples.
  static const std::vector<std::string> neutral = {
      "judge.python", "judge.harness_dir", "judge.scratch_root", "judge.cache_root", "judge.pch_root",
      "judge.compile_workers",
      "judge.executors", "judge.max_jobs", "judge.precompiled_header", "judge.light_headers", "judge.fast_build",
      "sampler.time_phases", "sampler.max_graphs"};
  for (const auto& n : neutral)
    if (k == n) return true;
  return false;
}

namespace {

void flatten(const YAML::Node& n, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(), out);
  } else if (n.IsSequence()) {
    bool scalars = true;
    for (const auto& e : n) scalars = scalars && !e.IsMap();
    if (scalars) {
      out[prefix] = YAML::Dump(n);
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) flatten(n[i], prefix + "[" + std::to_string(i) + "]", out);
    out[prefix + ".size"] = std::to_string(n.size());
  } else {
    out[prefix] = n.IsNull() ? "" : n.Scalar();
  }
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& renamed_keys() {
  // the learner's scoring knobs moved from trace to optim, where dice sft has them
  static const std::vector<std::pair<std::string, std::string>> renamed = {
      {"trace.fast", "optim.fast"}, {"trace.attn_chunk", "optim.attn_chunk"}, {"trace.logit_chunk", "optim.logit_chunk"}};
  return renamed;
}

std::vector<std::string> config_differences(const std::string& a_yaml, const std::string& b_yaml) {
  std::map<std::string, std::string> a, b;
  flatten(YAML::Load(a_yaml), "", a);
  flatten(YAML::Load(b_yaml), "", b);
  for (auto* m : {&a, &b})
    for (const auto& [old_key, key] : renamed_keys())
      if (auto it = m->find(old_key); it != m->end()) {
        m->emplace(key, it->second);
        m->erase(it);
      }
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::vector<std::string> diff;
  for (const auto& k : keys) {
    auto ia = a.find(k), ib = b.find(k);
    if (ia == a.end() || ib == b.end() || ia->second != ib->second) diff.push_back(k);
  }
  return diff;
}

}  // namespace dice::train
