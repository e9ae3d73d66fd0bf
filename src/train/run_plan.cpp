// The run directory of a training run (see run_plan.h).
#include "dice/train/run_plan.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "dice/ckpt/checkpoint.h"
#include "dice/train/metric_fields.h"
#include "dice/train/rl_config.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::train {

std::string plan_run_dir(const std::string& out, const std::string& resume, const std::string& yaml,
                         const ModelSource& model, const dist::World& world, run_dir::DirLock& lock,
                         bool (*affects_results)(const std::string&), const run_dir::Fingerprint& inputs) {
  std::string verdict;  // "ok:<ckpt>" or "error:<sentence>"
  if (world.is_root()) {
    try {
      run_dir::ensure_writable_dir(out, "the run directory (out)");
      lock = run_dir::lock_dir(out, "the run directory " + out);
      run_dir::Fingerprint fp = {{"model", model_identity(model)},
                                 {"about.model", std::filesystem::absolute(model.dir).lexically_normal().string()}};
      fp.insert(inputs.begin(), inputs.end());
      if (auto then = run_dir::read_fingerprint(out); then && ckpt::find_latest_complete(out, false)) {
        const std::string diff = run_dir::describe_differences(*then, fp);
        auto then_rest = *then, now_rest = fp;  // what differs besides the model
        then_rest.erase("model");
        now_rest.erase("model");
        const bool model_only = run_dir::describe_differences(then_rest, now_rest).empty();
        DICE_REQUIRE(diff.empty(), "The run directory ", out, " was started from ",
                     model_only ? "another model" : "other inputs", ": ", diff,
                     ". Resuming would mix two experiments; start from the recorded ", model_only ? "model" : "inputs",
                     " or pick another --out.");
      }
      const std::string recorded = out + "/config.yaml";
      std::string ckpt_dir;
      if (resume == "auto") ckpt_dir = ckpt::find_latest_complete(out).value_or("");
      else if (resume != "never") {
        DICE_REQUIRE(ckpt::check_checkpoint(resume).empty(), "--resume ", resume, " is not a complete checkpoint: ",
                     ckpt::check_checkpoint(resume)[0]);
        ckpt_dir = resume;
      }
      if (resume == "never" && ckpt::find_latest_complete(out, false))
        throw Error(str("The run directory ", out, " already holds checkpoints; continue it with --resume auto ",
                        "or pick another --out."));
      if (fs::exists(recorded)) {
        std::vector<std::string> bad;
        for (const auto& k : config_differences(fs::read_file(recorded), yaml))
          if (affects_results(k)) bad.push_back(k);
        if (!bad.empty()) {
          std::string keys;
          for (size_t i = 0; i < bad.size() && i < 12; ++i) keys += (i ? ", " : "") + bad[i];
          throw Error(str("The run directory ", out, " was recorded with a different config (", keys,
                          bad.size() > 12 ? ", ..." : "", "): resuming would mix two experiments. Use the recorded ",
                          "config (", recorded, ") or a new --out."));
        }
      }
      run_dir::write_fingerprint(out, fp);
      verdict = "ok:" + ckpt_dir;
    } catch (const Error& e) {
      verdict = std::string("error:") + e.what();
    }
  }
  verdict = world.broadcast(verdict);
  if (verdict.rfind("error:", 0) == 0) throw Error(verdict.substr(6));
  return verdict.substr(3);
}

double keep_metrics_through(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return 0;
  std::string kept;
  double elapsed = 0;
  fs::for_each_line(path, [&](int, const std::string& line) {
    const auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!rec.is_object() || rec.value("step", int64_t{0}) > step) return;
    kept += line + "\n";
    if (rec.contains("elapsed_s") && rec["elapsed_s"].is_number()) elapsed = std::max(elapsed, rec["elapsed_s"].get<double>());
  });
  fs::write_file_atomic(path, kept);
  return elapsed;
}

void MetricsLog::open(const std::string& run_dir, int64_t resume_step) {
  const char* strict = std::getenv("DICE_STRICT_METRICS");
  strict_ = strict && *strict && std::string(strict) != "0";
  path_ = run_dir + "/metrics.jsonl";
  elapsed_before_ = keep_metrics_through(path_, resume_step);
  start_s_ = now_s();
  events_ = tb::EventWriter(run_dir);
}

namespace {

// The numbers of a record as TensorBoard scalars: "key", nested objects "key/sub"; strings,
// booleans, arrays and the step itself are left out.
void scalar_fields(const nlohmann::json& j, const std::string& prefix,
                   std::vector<std::pair<std::string, double>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string tag = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it->is_object())
      scalar_fields(*it, tag, out);
    else if (it->is_number() && tag != "step" && tag != "time")
      out.emplace_back(tag, it->get<double>());
  }
}

}  // namespace

void MetricsLog::write(nlohmann::json& rec) {
  DICE_REQUIRE(is_open(), "MetricsLog::write before open");
  const double t = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count()) / 1e3;
  rec["time"] = t;
  rec["elapsed_s"] = std::round((elapsed_before_ + now_s() - start_s_) * 1e3) / 1e3;
  for (auto it = rec.begin(); it != rec.end(); ++it) {
    const std::string& key = it.key();
    if (is_metric_field(key)) continue;
    if (strict_) check_metric_fields({key});  // throws, naming it
    if (unknown_.insert(key).second)
      log::warn("metrics: '", key, "' is not a metrics field (include/dice/train/metric_fields.h); written anyway");
  }
  append_line(path_, rec.dump());
  std::vector<std::pair<std::string, double>> values;
  scalar_fields(rec, "", values);
  events_.scalars(rec.at("step").get<int64_t>(), values, t);
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream f(path, std::ios::app);
  f << line << "\n";
  f.flush();
  DICE_REQUIRE(f.good(), "Could not append to ", path, ".");
}

// Rank 0 alone decides whether the once-file disarms the fault, so the ranks agree even where that
// file is not on a shared file system.
void inject_fault(const FaultConfig& f, int64_t step, const dist::World& world) {
  if (f.kill_at_step != step) return;
  bool armed = true;
  if (world.is_root() && !f.once_file.empty()) armed = !fs::exists(f.once_file);
  if (world.broadcast(armed ? "1" : "0") != "1") return;
  world.barrier();
  if (world.rank() != f.rank) return;
  if (!f.once_file.empty()) fs::write_file_atomic(f.once_file, "killed at step " + std::to_string(step) + "\n");
  const bool stop = f.signal == "stop";
  std::fprintf(stderr, "dice: fault injection: rank %d %s itself at step %lld\n", f.rank, stop ? "stops" : "kills",
               static_cast<long long>(step));
  std::fflush(stderr);
  ::raise(stop ? SIGSTOP : SIGKILL);
}

}  // namespace dice::train
