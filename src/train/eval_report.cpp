// Reports, comparisons and baselines of `dice eval`.
#include "dice/train/eval_report.h"

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "dice/judge/judge.h"
#include "dice/judge/metrics.h"
#include "dice/judge/task.h"
#include "dice/train/sample_store.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/subprocess.h"

namespace dice::train {
using nlohmann::json;

namespace {

std::string pct(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v.get<double>());
  return buf;
}

std::string num(const json& v, const char* fmt = "%.2f") {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v.get<double>());
  return buf;
}

// Baseline speedups: speedup = baseline reference time / candidate time, where both exist.
void apply_baseline(std::vector<json>& records, const std::string& baseline_file) {
  if (baseline_file.empty()) return;
  json b;
  try {
    b = json::parse(fs::read_file(baseline_file));
  } catch (const json::exception& e) {
    throw Error(str("baseline file '", baseline_file, "' is not valid JSON: ", e.what()));
  }
  DICE_REQUIRE(b.contains("tasks") && b["tasks"].is_object(), "baseline file '", baseline_file,
               "' has no \"tasks\" object (make one with `dice eval baseline`)");
  for (auto& r : records) {
    auto& v = r["verdict"];
    auto it = b["tasks"].find(r["task_id"].get<std::string>());
    double rt = v.value("runtime_ms", -1.0);
    if (it != b["tasks"].end() && rt > 0) {
      v["ref_runtime_ms"] = it->get<double>();
      v["speedup"] = it->get<double>() / rt;
    }
  }
}

// tools/<script> ARGS... under `python` (matplotlib); a failure costs the plots, never the report.
void run_plot_script(const std::string& script_name, const std::vector<std::string>& args, const std::string& python) {
  std::string script = project_root() + "/tools/" + script_name;
  proc::SpawnOptions opt;
  opt.argv = {python, script};
  opt.argv.insert(opt.argv.end(), args.begin(), args.end());
  opt.inherit_env = true;
  opt.env = {"MPLBACKEND=Agg"};
  auto res = proc::run(opt, 120);
  if (!res.status.exited || res.status.code != 0)
    log::warn("eval: plots not written (", python, " ", script, ": ", res.status.describe(), "): ", res.err);
}

// The interpreter for plots: the judge's Python (it has torch; matplotlib comes with install-deps).
std::string plot_python(const EvalConfig& cfg) {
  return cfg.judge.python.empty() ? judge::default_python() : cfg.judge.python;
}

std::string key_of(double p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return buf;
}

json group_json(const judge::GroupMetrics& g) {
  json m = {{"tasks", g.tasks},
            {"samples", g.expected},
            {"samples_per_task", g.samples_per_task},
            {"missing", g.missing},
            {"exec", 100.0 * g.exec},
            {"compile_rate", 100.0 * g.compile_rate},
            {"correct", g.correct},
            {"fast_p", json::object()},
            {"pass_at_k", json::object()},
            {"failures", g.failures},
            {"findings", json::object()}};
  for (const auto& [p, r] : g.fast_p) m["fast_p"][key_of(p)] = 100.0 * r;
  for (const auto& [k, r] : g.pass_at_k) m["pass_at_k"][std::to_string(k)] = 100.0 * r;
  m["geomean_speedup"] = g.timed_correct > 0 ? json(g.geomean_speedup) : json();
  for (const auto& [check, by_sev] : g.findings)
    for (const auto& [sev, n] : by_sev) m["findings"][check + ":" + sev] = n;
  return m;
}

}  // namespace

json eval_metrics(const std::vector<json>& records, const std::vector<judge::Task>& tasks, const EvalConfig& cfg) {
  std::vector<judge::Verdict> verdicts;
  verdicts.reserve(records.size());
  for (const auto& r : records) verdicts.push_back(r.at("verdict").get<judge::Verdict>());
  judge::MetricsOptions opts;
  opts.fast_p = cfg.fast_p;
  opts.pass_k = cfg.pass_k;
  auto m = judge::compute_metrics(verdicts, tasks, opts);
  json out = {{"levels", json::object()}};
  for (const auto& [level, g] : m.by_level) out["levels"][std::to_string(level)] = group_json(g);
  out["levels"]["all"] = group_json(m.overall);
  return out;
}

std::string metrics_table_md(const std::vector<json>& metrics) {
  std::set<std::string> levels;
  for (const auto& m : metrics)
    for (auto it = m["levels"].begin(); it != m["levels"].end(); ++it)
      if (it.key() != "all") levels.insert(it.key());
  std::string head = "| checkpoint |", rule = "|---|";
  for (const auto& l : levels) {
    head += " L" + l + " Exec | L" + l + " fast_1 | L" + l + " fast_2 |";
    rule += "---|---|---|";
  }
  head += " all Exec | all fast_1 | all fast_2 | compiled | geomean speedup | samples |";
  rule += "---|---|---|---|---|---|";
  std::string out = head + "\n" + rule + "\n";
  for (const auto& m : metrics) {
    std::string row = "| " + m.value("label", std::string("?")) + " |";
    auto cell = [](const json& lv) {
      const json& f = lv.contains("fast_p") ? lv["fast_p"] : json::object();
      return " " + pct(lv.value("exec", json())) + " | " + pct(f.value("1", json())) + " | " + pct(f.value("2", json())) +
             " |";
    };
    for (const auto& l : levels) row += m["levels"].contains(l) ? cell(m["levels"][l]) : " - | - | - |";
    const auto& all = m["levels"]["all"];
    row += cell(all) + " " + pct(all.value("compile_rate", json())) + " | " + num(all.value("geomean_speedup", json())) +
           " | " + std::to_string(all.value("samples", 0)) + " |";
    out += row + "\n";
  }
  return out;
}

std::string write_report(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::string& out_dir) {
  return write_report(cfg, tasks, out_dir, SampleStore(out_dir, 0).read_all());
}

std::string write_report(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::string& out_dir,
                         std::vector<json> records) {
  apply_baseline(records, cfg.baseline);
  json m = eval_metrics(records, tasks, cfg);
  m["label"] = cfg.checkpoint.empty() ? (cfg.use_solutions ? std::string("solutions") : cfg.responses) : cfg.checkpoint;
  fs::write_file_atomic(out_dir + "/report.json", m.dump(2) + "\n");

  std::string md = "# dice eval: " + m["label"].get<std::string>() + "\n\n";
  md += "Percent of all tasks (a missing or failed sample counts as a failure). fast_p: correct and speedup > p.\n\n";
  md += metrics_table_md({m});
  const auto& all = m["levels"]["all"];
  if (all.contains("pass_at_k") && !all["pass_at_k"].empty()) {
    md += "\npass@k:";
    for (auto it = all["pass_at_k"].begin(); it != all["pass_at_k"].end(); ++it)
      md += " pass@" + it.key() + " = " + pct(it.value());
    md += "\n";
  }
  if (all.contains("failures")) {
    md += "\nFailure classes:";
    for (auto it = all["failures"].begin(); it != all["failures"].end(); ++it)
      md += " " + it.key() + " " + std::to_string(it.value().get<int64_t>()) + ";";
    md += "\n";
  }
  if (all.contains("findings") && !all["findings"].empty()) {
    md += "\nStatic-check findings:";
    for (auto it = all["findings"].begin(); it != all["findings"].end(); ++it)
      md += " " + it.key() + " " + std::to_string(it.value().get<int64_t>()) + ";";
    md += "\n";
  }
  if (cfg.plots && !records.empty()) {
    run_plot_script("plot_eval.py", {out_dir + "/samples.jsonl", out_dir}, plot_python(cfg));
    if (fs::exists(out_dir + "/speedup.png")) md += "\n![speedup](speedup.png) ![failures](failures.png)\n";
  }
  fs::write_file_atomic(out_dir + "/report.md", md);
  return md;
}

std::string compare_reports(const std::vector<std::string>& dirs, const std::string& out_dir) {
  std::vector<json> ms;
  for (const auto& d : dirs) {
    std::string p = d + "/report.json";
    DICE_REQUIRE(fs::exists(p), "'", d, "' has no report.json (run `dice eval` there first)");
    try {
      ms.push_back(json::parse(fs::read_file(p)));
    } catch (const json::exception& e) {
      throw Error(str("'", p, "' is not valid JSON: ", e.what()));
    }
  }
  std::filesystem::create_directories(out_dir);
  std::string md = "# dice eval: comparison\n\n" + metrics_table_md(ms);
  std::vector<std::string> args = {out_dir};
  bool samples = true;
  for (const auto& d : dirs) {
    args.push_back(d);
    samples = samples && fs::exists(d + "/samples.jsonl");
  }
  if (samples) {  // the pass rate of each task side by side, and what became of the samples
    std::error_code ec;
    std::filesystem::remove(out_dir + "/compare.png", ec);  // never an older run's plot
    run_plot_script("plot_compare.py", args, judge::default_python());
    if (fs::exists(out_dir + "/compare.png")) md += "\n![pass rate per task and outcome of the samples](compare.png)\n";
  }
  fs::write_file_atomic(out_dir + "/compare.md", md);
  fs::write_file_atomic(out_dir + "/compare.json", json(ms).dump(2) + "\n");
  return md;
}

void save_resolved_config(const std::string& out_dir, const std::string& yaml) {
  std::filesystem::create_directories(out_dir);
  fs::write_file_atomic(out_dir + "/config.yaml", yaml);
}

void write_baseline(const EvalConfig& cfg_in, const dist::World& world, const std::string& out_file) {
  EvalConfig cfg = cfg_in;
  cfg.judge.timing = true;
  auto tasks = judge::load_tasks(cfg.tasks);
  auto shard = dist::shard_range(static_cast<int64_t>(tasks.size()), world.rank(), world.size());
  std::vector<judge::Job> jobs;
  for (int64_t i = shard.begin; i < shard.end; ++i) {
    if (tasks[i].solution.empty()) {
      log::warn("baseline: task '", tasks[i].id, "' has no solution to time its reference with; skipped");
      continue;
    }
    jobs.push_back({&tasks[i], tasks[i].solution, true});
  }
  judge::Judge j(cfg.judge);
  auto verdicts = j.judge(jobs);
  json mine = json::object();
  for (const auto& v : verdicts)
    if (v.ref_runtime_ms > 0) mine[v.task_id] = v.ref_runtime_ms;
  auto parts = world.gather(mine.dump());
  if (!world.is_root()) return;
  json out = {{"device", cfg.judge.device}, {"tasks", json::object()}};
  for (const auto& p : parts) out["tasks"].update(json::parse(p));
  fs::write_file_atomic(out_file, out.dump(2) + "\n");
  log::info("baseline: ", out["tasks"].size(), " reference timings written to ", out_file);
}

}  // namespace dice::train
