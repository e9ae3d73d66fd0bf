#pragma once
// Reports of `dice eval`: report.json (metrics per level and overall), report.md (a table shaped
// like the DICE paper's: one row per checkpoint, Exec and fast_1/fast_2 per level, plus compile
// rate, geometric-mean speedup, pass@k, failure classes and static-check findings) and PNG plots.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "dice/dist/world.h"
#include "dice/judge/task.h"
#include "dice/train/eval_runner.h"

namespace dice::train {

// Metrics of merged sample records (see judge/metrics.h) as JSON:
// {"label", "levels": {"1": M, ..., "all": M}} with M = {tasks, samples, exec, compile_rate,
//  fast_p: {"1": ..}, geomean_speedup, pass_at_k: {"1": ..}, failures: {..}, findings: {..}}.
nlohmann::json eval_metrics(const std::vector<nlohmann::json>& records, const std::vector<judge::Task>& tasks,
                            const EvalConfig& cfg);
// The paper-shaped Markdown table for one or several metric objects (one row each).
std::string metrics_table_md(const std::vector<nlohmann::json>& metrics);

void save_resolved_config(const std::string& out_dir, const std::string& yaml);
// Times every task's reference (through its honest solution) and writes {device, tasks: {id: ms}}.
void write_baseline(const EvalConfig& cfg, const dist::World& world, const std::string& out_file);

}  // namespace dice::train
