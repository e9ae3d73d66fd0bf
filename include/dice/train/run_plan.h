#pragma once
// The run directory of a training run (`dice train`, `dice sft`), decided once on rank 0 and told
// to every rank. It follows dice/util/run_dir.h: writable, locked by rank 0 for the whole run, its
// fingerprint.json (the starting model's identity, plus `inputs`: e.g. the digest of SFT's tokenized
// examples) must match on resume, and a resume is refused when the recorded config.yaml differs
// in a key for which `affects_results` is true.
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dice/dist/world.h"
#include "dice/train/rl_config.h"
#include "dice/train/model_source.h"
#include "dice/util/run_dir.h"
#include "dice/util/tensorboard.h"

namespace dice::train {

// `resume`: "auto" (the latest complete checkpoint in `out`, if any), "never" (refuse a run
// directory that holds checkpoints) or a checkpoint directory. Returns the checkpoint to resume
// from ("" = a fresh start); refusals are dice::Errors on every rank, with the same sentence.
std::string plan_run_dir(const std::string& out, const std::string& resume, const std::string& yaml,
                         const ModelSource& model, const dist::World& world, run_dir::DirLock& lock,
                         bool (*affects_results)(const std::string& dotted_key),
                         const run_dir::Fingerprint& inputs = {});

// Fault injection (tests): a collective of every rank at the start of `step` (every rank has the
// same config). When f.kill_at_step == step, and f.once_file (if set) does not exist yet, every rank
// waits until all have finished the step before (so its checkpoint is complete: a learner may still
// be writing it while the others move on), then rank f.rank writes the once-file and sends itself
// SIGKILL (a dead rank) or SIGSTOP (a stuck one).
void inject_fault(const FaultConfig& f, int64_t step, const dist::World& world);

// Keeps the records of metrics.jsonl up to `step` (the checkpoint a run resumes from): the steps
// after it run again. A line cut short (a run killed while appending) is dropped. Returns the
// largest `elapsed_s` of the kept records (0 when there is none): where the run's clock goes on.
double keep_metrics_through(const std::string& path, int64_t step);

// Appends one line (a metrics record) to `path`, flushed; a dice::Error when that fails.
void append_line(const std::string& path, const std::string& line);

// What a run records per step (rank 0): <run>/metrics.jsonl, one JSON record per step, and the
// same numbers as TensorBoard scalars in <run>/events.out.tfevents.* (a new file per start; the
// tags are the record's keys, nested objects as "key/sub"). Every record gets `time` (Unix
// seconds) and `elapsed_s` (the run's seconds so far, counted on across resumes).
class MetricsLog {
 public:
  MetricsLog() = default;
  // Keeps the records through `resume_step` (the later steps run again) and starts an event file.
  void open(const std::string& run_dir, int64_t resume_step);
  bool is_open() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // rec needs "step"; `time` and `elapsed_s` are added to it. Its fields must be metrics fields
  // (metric_fields.h): another name is a dice::Error with DICE_STRICT_METRICS=1 (as the tests run),
  // else a warning, once per name, and written all the same.
  void write(nlohmann::json& rec);

 private:
  std::string path_;
  double start_s_ = 0;         // steady clock at open()
  double elapsed_before_ = 0;  // the kept records' last elapsed_s
  tb::EventWriter events_;
  bool strict_ = false;
  std::set<std::string> unknown_;  // names warned about
};

}  // namespace dice::train
