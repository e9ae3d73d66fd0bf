#pragma once
// Checkpoint directories: save, discover, load, describe.
//
// Layout of <run_dir>/step_000120/ (format version kFormatVersion):
//   model.h5          one dataset per HF parameter name, dtype and shape kept (see store.h)
//   optim_rank<k>.h5  AdamW state of learner rank k: "step", groups "m" and "v" (by parameter
//                     name; with ZeRO-1 each rank holds only its own parameters)
//   state.h5          step, stage, cursor, policy_version, format_version (scalars/strings),
//                     rng/rank<k> (opaque bytes), metrics_json, config_yaml
//   <copied files>    e.g. config.json and tokenizer files, so a checkpoint describes itself
//   COMPLETE          JSON {format_version, step, files}: written last; its absence = partial
//
// Commit protocol (save_checkpoint, called by every learner rank with the same step):
//   leader removes a stale step_N.tmp/ and creates it; barrier();
//   every rank writes its optim_rank<k>.h5, the leader also model.h5, state.h5, copies; barrier();
//   the leader fsyncs, renames step_N.tmp -> step_N, writes COMPLETE, prunes to keep_last; barrier().
// `barrier` comes from the caller (dist module); the default is a no-op for one process.
//
// Every dataset carries a SHA-256 checksum; loads verify it unless `verify` is false. A missing,
// corrupt, truncated or other-format-version file raises a dice::Error naming the file.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dice/ckpt/store.h"

namespace dice::ckpt {

struct TrainState {
  int64_t step = 0;
  std::string stage;               // e.g. "sft", "infill", "e2e", "import"
  int64_t cursor = 0;              // curriculum cursor
  int64_t policy_version = 0;
  std::map<int, std::string> rng;  // rank -> opaque RNG state bytes (gathered by the caller)
  std::string metrics_json = "{}";
  std::string config_yaml;         // resolved run config
};

struct OptimState {
  int64_t step = 0;  // AdamW step count (bias correction)
  NamedTensors m, v;
};

struct SaveOptions {
  int rank = 0;            // this learner's rank: writes optim_rank<rank>.h5
  bool leader = true;      // writes model.h5, state.h5, the copies; commits and prunes
  int keep_last = 0;       // keep the newest K complete checkpoints (0: keep all)
  std::vector<std::string> copy_files;  // files the leader copies into the checkpoint (missing: skipped)
  std::function<void()> barrier = [] {};
};

// "step_000120" (at least six digits).
std::string step_dir_name(int64_t step);

// One rank's part of a checkpoint (see the commit protocol above). `model` and `state` are used
// on the leader only; `optim` may be null (no optimizer state from this rank). Returns the final
// checkpoint directory.
std::string save_checkpoint(const std::string& run_dir, int64_t step, const NamedTensors& model,
                            const OptimState* optim, const TrainState& state, const SaveOptions& opts = {});

// One process holding every learner's optimizer state (tests, tools, single-GPU runs): writes
// everything into step_N.tmp/, calls barrier() once, then commits (rename, COMPLETE, prune).
std::string save_checkpoint(const std::string& run_dir, int64_t step, const NamedTensors& model,
                            const std::map<int, OptimState>& optim_by_rank, const TrainState& state,
                            int keep_last = 0, const std::function<void()>& barrier = [] {});

NamedTensors load_model(const std::string& ckpt_dir, bool verify = true);
std::vector<TensorInfo> list_model_tensors(const std::string& ckpt_dir);
TrainState load_state(const std::string& ckpt_dir, bool verify = true);
OptimState load_optim(const std::string& ckpt_dir, int rank, bool verify = true);
std::vector<int> optim_ranks(const std::string& ckpt_dir);  // ranks with an optim_rank<k>.h5

// Empty when `ckpt_dir` is a complete checkpoint whose files open (and, with `verify`, whose
// checksums match); otherwise the reasons, one sentence each.
std::vector<std::string> check_checkpoint(const std::string& ckpt_dir, bool verify = true);

// Newest complete, valid step_* under run_dir; partial or corrupt ones are skipped with a
// warning naming them and why. nullopt when none (or run_dir does not exist).
std::optional<std::string> find_latest_complete(const std::string& run_dir, bool verify = true);

// Deletes all but the newest `keep_last` complete checkpoints (and stale .tmp dirs of older
// steps). Returns the deleted directories.
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep_last);

// Human-readable summary for `dice ckpt info`: step, stage, tensors, bytes, dtypes, config,
// optimizer ranks, verification status.
// *verified_ok (optional) is false when verification ran and found a problem.
std::string describe(const std::string& ckpt_dir, bool verify = true, bool* verified_ok = nullptr);

}  // namespace dice::ckpt
