#pragma once
// Resumable per-sample result store of `dice eval` (and rollout dumps): one JSONL record per
// (task_id, sample_id). Each rank appends to its own part file (flushed per record), so an
// interrupted run loses at most the record being written; a rerun reads every part, skips the
// keys already present, and rank 0 merges the parts into `samples.jsonl` in task order.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dice::train {

std::string sample_key(const std::string& task_id, int sample_id);

class SampleStore {
 public:
  SampleStore(std::string out_dir, int rank);
  ~SampleStore();

  // Keys ("task#sample") of every complete record in the folder (all ranks' parts + merged file).
  std::set<std::string> done_keys() const;
  // Appends one record (must hold "task_id" and "sample_id") and flushes it.
  void append(const nlohmann::json& record);
  // Every complete record, deduplicated by key (first occurrence wins).
  std::vector<nlohmann::json> read_all() const;
  // Writes samples.jsonl ordered by `task_order` then sample_id (root only, after a barrier).
  std::vector<nlohmann::json> merge(const std::vector<std::string>& task_order) const;

  const std::string& out_dir() const { return out_dir_; }

 private:
  std::vector<std::string> files() const;
  std::string out_dir_;
  int rank_;
  std::FILE* part_ = nullptr;
};

}  // namespace dice::train
