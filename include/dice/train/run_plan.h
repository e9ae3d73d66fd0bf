#pragma once
// The run directory of a training run (`dice train`, `dice sft`), decided once on rank 0 and told
// to every rank. It follows dice/util/run_dir.h: writable, locked by rank 0 for the whole run, its
// fingerprint.json (the starting model's identity) must match on resume, and a resume is refused
// when the recorded config.yaml differs in a key for which `affects_results` is true.
#include <string>

#include "dice/dist/world.h"
#include "dice/train/model_source.h"
#include "dice/util/run_dir.h"

namespace dice::train {

// `resume`: "auto" (the latest complete checkpoint in `out`, if any), "never" (refuse a run
// directory that holds checkpoints) or a checkpoint directory. Returns the checkpoint to resume
// from ("" = a fresh start); refusals are dice::Errors on every rank, with the same sentence.
std::string plan_run_dir(const std::string& out, const std::string& resume, const std::string& yaml,
                         const ModelSource& model, const dist::World& world, run_dir::DirLock& lock,
                         bool (*affects_results)(const std::string& dotted_key));

// Appends one line (a metrics record) to `path`, flushed; a dice::Error when that fails.
void append_line(const std::string& path, const std::string& line);

}  // namespace dice::train
