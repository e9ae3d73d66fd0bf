#pragma once
// What every training driver (`dice train`, `dice sft`) sets up the same way, in the order a run
// needs it:
//   RunContext ctx(cfg.model, cfg.device, world);   the model source, its config and tokenizer
//                                                    (checked to agree), this rank's device
//   ctx.plan(out, resume, yaml, affects, inputs);    the run directory (run_plan.h): locked by
//                                                    rank 0, fingerprint checked, resume decided
//   ctx.start_weights()                              the resumed checkpoint's weights, else the model's
//   ctx.open_outputs(step)                           rank 0: out/, config.yaml, metrics.jsonl (kept
//                                                    through `step`), log.txt
// The driver then owns what differs (its data, its models, its communicators, its loop); the
// checkpoints it writes copy ctx.side_files() (config, tokenizer, remote code of the model).
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "dice/dist/world.h"
#include "dice/model/config.h"
#include "dice/model/transformer.h"
#include "dice/text/tokenizer.h"
#include "dice/train/model_source.h"
#include "dice/train/run_plan.h"
#include "dice/util/run_dir.h"

namespace dice::train {

class RunContext {
 public:
  // `model` is the config's `model` (an HF folder, a checkpoint or a run folder); `device` is
  // auto | cpu | cuda | cuda:N (this rank's local GPU). Refusals are dice::Errors with a sentence.
  RunContext(const std::string& model, const std::string& device, const dist::World& world);
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  // Decides the run directory `out` (plan_run_dir); afterwards resume_from() is the checkpoint to
  // resume from, "" for a fresh start.
  void plan(const std::string& out, const std::string& resume, const std::string& yaml,
            bool (*affects_results)(const std::string& dotted_key), const run_dir::Fingerprint& inputs = {});
  // The weights the run starts from (after plan): the resumed checkpoint's, else the model's;
  // start_dir() names where they come from (for messages).
  model::NamedTensors start_weights() const;
  const std::string& start_dir() const { return resume_from_.empty() ? model_.dir : resume_from_; }
  // Rank 0 (a no-op elsewhere): creates the run directory, writes config.yaml, opens metrics.jsonl
  // (its records kept through `step`: later steps run again) and copies the log to log.txt.
  void open_outputs(int64_t step);

  const ModelSource& model() const { return model_; }
  const model::ModelConfig& model_config() const { return mcfg_; }
  const text::Tokenizer& tokenizer() const { return *tok_; }
  const std::vector<std::string>& side_files() const { return side_files_; }
  torch::Device device() const { return device_; }
  const std::string& yaml() const { return yaml_; }  // the run's config as given to plan()
  const std::string& resume_from() const { return resume_from_; }
  bool resuming() const { return !resume_from_.empty(); }
  MetricsLog& metrics() { return metrics_; }

 private:
  const dist::World& world_;
  ModelSource model_;
  model::ModelConfig mcfg_;
  std::optional<text::Tokenizer> tok_;
  std::vector<std::string> side_files_;  // of model_.dir, copied into every checkpoint
  torch::Device device_{torch::kCPU};
  std::string out_, yaml_, resume_from_;
  run_dir::DirLock lock_;  // rank 0: the run directory, for the whole run
  MetricsLog metrics_;     // rank 0
};

}  // namespace dice::train
