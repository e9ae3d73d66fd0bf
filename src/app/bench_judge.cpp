// `dice bench judge`: judge throughput vs a KernelBench-style one-by-one evaluation, same candidates,
// one run. Candidates are the tasks' honest solutions, each repeated --dup times (RL groups hold
// duplicates). Prints candidates/min, compile seconds p50/p90, the ratio, and verdict agreement.
// --build-variants also times one build per compile variant (headers, MAX_JOBS) on a cold cache.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "dice/config/config.h"
#include "dice/judge/compile_pool.h"
#include "dice/judge/judge.h"
#include "dice/judge/task.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/subprocess.h"
#include "dice/util/timer.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct BenchJudgeArgs {
  ConfigArgs config;
  std::string tasks;
  int n_tasks = 8;
  int dup = 3;
  int baseline = -1;  // candidates evaluated by the baseline (-1: all)
  bool build_variants = false;
  std::string out;
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// One build of `code` per variant into a fresh cache: wall seconds each.
void bench_build_variants(const judge::Judge& judge, const std::string& code, nlohmann::json& report) {
  const auto& cfg = judge.config();
  struct Variant {
    const char* name;
    bool light;
    bool pch;
    int max_jobs;
  };
  const Variant variants[] = {{"torch/extension.h (load_inline default)", false, false, 2},
                              {"light headers (torch/types.h + pybind)", true, false, 2},
                              {"light headers, MAX_JOBS=1", true, false, 1},
                              {"torch/extension.h from the PCH", true, true, 2}};
  std::string root = fs::make_temp_dir("dice_bench_variants_");
  std::string cand = root + "/cand.py";
  fs::write_file(cand, code);
  for (const auto& v : variants) {
    judge::CompileSettings s;
    s.python = cfg.python;
    s.harness_dir = cfg.harness_dir;
    s.cache_root = str(root, "/cache_", v.light, v.pch, v.max_jobs);
    s.scratch_root = root;
    s.toolchain = judge.toolchain();
    s.workers = 1;
    s.timeout_s = cfg.compile_timeout_s;
    s.light_headers = v.light;
    s.precompiled_header = v.pch;
    s.max_jobs = v.max_jobs;
    s.sandbox = cfg.sandbox;
    s.uid_base = -1;
    auto tc = nlohmann::json::parse(judge.toolchain(), nullptr, false);
    s.cuda = !tc.is_discarded() && tc.value("cuda_available", false) && cfg.device != "cpu";
    if (s.cuda && !tc.value("arch", "").empty()) s.extra_env.push_back("TORCH_CUDA_ARCH_LIST=" + tc.value("arch", ""));
    judge::make_cache_dir(s.cache_root);
    judge::CompileResult res;
    {
      judge::CompilePool pool(s);
      if (v.pch) {  // once per toolchain and cache: not part of a candidate's build
        Timer pt;
        std::string dir = pool.wait_for_pch();
        std::printf("  precompiled header: %s in %.1f s (once per toolchain)\n", dir.empty() ? "NOT built" : "built",
                    pt.elapsed_s());
        report["pch_seconds"] = pt.elapsed_s();
        report["pch_built"] = !dir.empty();
      }
      res = pool.compile(cand, code);
    }
    std::printf("  build variant %-42s %6.1f s  (%s)\n", v.name, res.seconds, judge::failure_name(res.failure));
    report["build_variants"].push_back({{"variant", v.name}, {"seconds", res.seconds},
                                        {"status", judge::failure_name(res.failure)}});
  }
  judge::remove_tree(root);
}

void run(const BenchJudgeArgs& a) {
  auto cfg = config::load<judge::JudgeConfig>(config::load_tree(a.config.config_path, a.config.sets));
  cfg.timing = true;
  judge::Judge judge(cfg);
  auto tc = nlohmann::json::parse(judge.toolchain(), nullptr, false);
  bool cuda = cfg.device == "cuda" || (cfg.device == "auto" && tc.value("cuda_available", false));
  std::string tasks_path = a.tasks.empty()
                               ? str(DICE_SOURCE_DIR, "/configs/tasks/builtin_", cuda ? "cuda" : "cpu", ".jsonl")
                               : a.tasks;
  auto tasks = judge::load_tasks(tasks_path);
  std::vector<const judge::Task*> chosen;
  for (const auto& t : tasks)
    if (!t.solution.empty() && static_cast<int>(chosen.size()) < a.n_tasks) chosen.push_back(&t);
  DICE_REQUIRE(!chosen.empty(), "no task in ", tasks_path, " has a solution to use as a candidate");
  std::vector<judge::Job> jobs;
  for (int d = 0; d < a.dup; ++d)
    for (const auto* t : chosen) jobs.push_back({t, t->solution, true});
  std::printf("bench judge: %zu candidates (%zu tasks x %d duplicates) from %s, %s, toolchain %s\n", jobs.size(),
              chosen.size(), a.dup, tasks_path.c_str(), cuda ? "cuda" : "cpu", judge.toolchain().c_str());
  nlohmann::json report;

  // 1. the judge (cold build cache: every distinct candidate really builds). The precompiled
  // header is made once per toolchain and cache (it persists with judge.cache_root), so it is
  // timed apart, before the candidates.
  if (cfg.precompiled_header) {
    Timer pt;
    std::string dir = judge.wait_for_pch();
    std::printf("judge: precompiled header %s after %.1f s (once per toolchain and cache)\n",
                dir.empty() ? "NOT available" : "ready", pt.elapsed_s());
    report["pch"] = {{"ready", !dir.empty()}, {"wait_s", pt.elapsed_s()}};
  }
  Timer t;
  log::Progress bar("judge", static_cast<long>(jobs.size()));
  auto verdicts = judge.judge(jobs, [&](size_t d, size_t) { bar.update(static_cast<long>(d)); });
  bar.finish();
  double judge_s = t.elapsed_s();
  std::vector<double> compile_s;
  int correct = 0;
  for (const auto& v : verdicts) {
    if (!v.cache_hit && v.compile_s > 0) compile_s.push_back(v.compile_s);
    correct += v.correct;
  }
  double judge_rate = 60.0 * jobs.size() / judge_s;
  // Duplicates share a build; the rate over distinct candidates is what is left without them.
  double distinct_rate = 60.0 * chosen.size() / judge_s;
  std::printf("judge:    %zu candidates in %.1f s = %.2f candidates/min (%.2f distinct/min); %d correct; builds %zu, "
              "compile s p50 %.1f p90 %.1f\n",
              jobs.size(), judge_s, judge_rate, distinct_rate, correct, compile_s.size(), quantile(compile_s, 0.5),
              quantile(compile_s, 0.9));
  report["judge"] = {{"candidates", jobs.size()}, {"distinct", chosen.size()}, {"seconds", judge_s},
                     {"candidates_per_min", judge_rate}, {"distinct_per_min", distinct_rate}, {"correct", correct},
                     {"builds", compile_s.size()}, {"compile_s_p50", quantile(compile_s, 0.5)},
                     {"compile_s_p90", quantile(compile_s, 0.9)}};

  // 2. KernelBench-style: one process per candidate, reference first, build in place, no cache
  size_t nb = a.baseline < 0 ? jobs.size() : std::min(jobs.size(), static_cast<size_t>(a.baseline));
  std::string root = fs::make_temp_dir("dice_bench_oneshot_");
  int agree = 0, base_correct = 0;
  Timer tb;
  log::Progress bar2("one-by-one", static_cast<long>(nb));
  for (size_t i = 0; i < nb; ++i) {
    std::string dir = str(root, "/", i);
    judge::make_public_dir(dir);
    fs::write_file(dir + "/ref.py", jobs[i].task->reference);
    fs::write_file(dir + "/cand.py", jobs[i].text);
    proc::SpawnOptions o;
    o.argv = {cfg.python.empty() ? judge::default_python() : cfg.python,
              str(DICE_SOURCE_DIR, "/src/judge/python/oneshot.py"), dir + "/ref.py", dir + "/cand.py",
              cuda ? "cuda" : "cpu", std::to_string(cfg.trials), "1"};
    o.inherit_env = true;
    o.env = {"TORCH_EXTENSIONS_DIR=" + dir + "/ext"};
    o.cwd = dir;
    auto r = proc::run(o, cfg.compile_timeout_s + cfg.exec_timeout_s);
    std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) == std::string::npos ? 0 : r.out.rfind('\n', r.out.size() - 2) + 1);
    auto j = nlohmann::json::parse(last, nullptr, false);
    bool ok = !j.is_discarded() && j.value("correct", false);
    base_correct += ok;
    agree += ok == verdicts[i].correct;
    if (ok != verdicts[i].correct)
      std::printf("  disagreement on candidate %zu (%s): judge %s, one-by-one %s %s\n", i, jobs[i].task->id.c_str(),
                  judge::failure_name(verdicts[i].failure), ok ? "correct" : "incorrect",
                  j.is_discarded() ? r.err.substr(r.err.size() > 300 ? r.err.size() - 300 : 0).c_str()
                                   : j.value("error", "").c_str());
    bar2.update(static_cast<long>(i + 1));
  }
  bar2.finish();
  double base_s = tb.elapsed_s();
  double base_rate = 60.0 * nb / base_s;
  judge::remove_tree(root);
  std::printf("one-by-one: %zu candidates in %.1f s = %.2f candidates/min; %d correct\n", nb, base_s, base_rate,
              base_correct);
  std::printf("ratio: judge %.1fx the one-by-one candidates/min (%.1fx counting distinct candidates only); verdicts "
              "agree on %d/%zu\n",
              judge_rate / base_rate, distinct_rate / base_rate, agree, nb);
  report["one_by_one"] = {{"candidates", nb}, {"seconds", base_s}, {"candidates_per_min", base_rate},
                          {"correct", base_correct}};
  report["ratio"] = judge_rate / base_rate;
  report["ratio_distinct"] = distinct_rate / base_rate;
  report["verdicts_agree"] = agree;
  report["verdicts_compared"] = nb;

  if (a.build_variants) bench_build_variants(judge, chosen[0]->solution, report);
  if (!a.out.empty()) fs::write_file(a.out, report.dump(2) + "\n");
}

void setup(CLI::App& cmd) {
  auto a = std::make_shared<BenchJudgeArgs>();
  a->config.add_to(cmd);
  cmd.add_option("--tasks", a->tasks, "task set with solutions (default: built-in cpu/cuda set)");
  cmd.add_option("--n-tasks", a->n_tasks, "distinct tasks (candidates = their solutions)");
  cmd.add_option("--dup", a->dup, "copies of each candidate (duplicates in RL groups)");
  cmd.add_option("--baseline", a->baseline, "candidates evaluated one by one (-1 = all)");
  cmd.add_flag("--build-variants", a->build_variants, "also time one cold build per compile variant");
  cmd.add_option("--out", a->out, "write the numbers as JSON");
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_BENCH("judge", "judge throughput vs a KernelBench-style one-by-one evaluation (same candidates)", setup);

}  // namespace dice::app
