// `dice bench judge`: judge throughput on distinct, never-seen candidates, cold (every candidate
// builds; the precompiled header and the fast builder's recipe are made first and timed apart) and
// warm (the same candidates again: builds come from the cache). Candidates are the tasks' honest
// solutions plus --variants distinct variants of each that the bench makes itself (kernels renamed,
// another block size, other comments and layout), each repeated --dup times (RL groups hold
// duplicates). Prints distinct candidates/min, latency per candidate (p50/p99) and its split into
// build / queue / execution, fast builds and fallbacks, and the verdicts. --baseline N also runs N of
// them one by one, KernelBench-style; --write-candidates writes them as `dice judge` input (to judge
// the same candidates with another build of dice). --build-variants also times one build per
// compile variant (headers, MAX_JOBS) on a cold cache.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/bench/bench.h"
#include "dice/config/config.h"
#include "dice/judge/compile_pool.h"
#include "dice/judge/judge.h"
#include "dice/judge/task.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/subprocess.h"
#include "dice/util/timer.h"

namespace dice::bench {
namespace {

struct BenchJudgeArgs {
  std::string config_path;         // the judge's config (-c), with --set overrides
  std::vector<std::string> sets;
  std::string tasks;
  int n_tasks = 1000;
  int variants = 1;
  int dup = 1;
  int baseline = 0;  // candidates evaluated one by one (-1: all)
  bool warm = true;
  bool timing = false;
  bool build_variants = false;
  std::string out, write_candidates;
};

// A distinct variant of an honest solution, the kind of difference samples of one policy show:
// kernels renamed (k % 3 == 0), another block size (256 -> 128 threads, k % 3 == 1), other
// comments and indentation (k % 3 == 2). Each also carries its own comment, so no two are equal.
std::string make_variant(const std::string& code, int k) {
  std::string v = code;
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = v.find(from); at != std::string::npos; at = v.find(from, at + to.size())) v.replace(at, from.size(), to);
  };
  if (k % 3 == 0) {
    replace_all("_kernel(", str("_kernel_v", k, "("));
    replace_all("_kernel<", str("_kernel_v", k, "<"));
  } else if (k % 3 == 1) {
    replace_all("256", "128");
  } else {
    replace_all("\n  ", "\n    ");
    replace_all("__global__ ", "// a kernel of variant " + std::to_string(k) + "\n__global__ ");
  }
  const std::string mark = "cuda_source = r\"\"\"";
  size_t at = v.find(mark);
  if (at == std::string::npos) at = v.find("cpp_source = r\"\"\"");
  const std::string note = str("\n// bench variant ", k, "\n");
  if (at != std::string::npos) v.insert(v.find('"', at) + 3, note);
  else v += "\n# bench variant " + std::to_string(k) + "\n";
  return v;
}

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

struct Pass {
  double wall_s = 0;
  std::vector<double> latency_s;  // submit -> verdict, per candidate
  std::vector<judge::Verdict> verdicts;
};

Pass judge_pass(judge::Judge& judge, const std::vector<judge::Job>& jobs, const char* label) {
  Pass p;
  p.latency_s.assign(jobs.size(), -1);
  Timer t;
  log::Progress bar(label, static_cast<long>(jobs.size()));
  long done = 0;
  p.verdicts = judge.judge(jobs, nullptr, [&](size_t i, const judge::Verdict&) {
    p.latency_s[i] = t.elapsed_s();
    bar.update(++done);
  });
  bar.finish();
  p.wall_s = t.elapsed_s();
  return p;
}

nlohmann::json report_pass(const char* name, const Pass& p, size_t distinct) {
  std::vector<double> build, exec, queue;
  int correct = 0, builds = 0;
  std::map<std::string, int> classes;
  for (size_t i = 0; i < p.verdicts.size(); ++i) {
    const auto& v = p.verdicts[i];
    correct += v.correct;
    classes[judge::failure_name(v.failure)]++;
    if (!v.cache_hit && v.compile_s > 0) {
      build.push_back(v.compile_s);
      ++builds;
    }
    if (v.exec_s > 0) exec.push_back(v.exec_s);
    queue.push_back(std::max(0.0, p.latency_s[i] - v.compile_s - v.exec_s));
  }
  const double rate = 60.0 * static_cast<double>(distinct) / p.wall_s;
  std::string hist;
  for (auto& [k, n] : classes) hist += str(" ", k, "=", n);
  std::printf("%-5s %zu candidates (%zu distinct) in %.1f s = %.1f distinct/min; latency p50 %.1f s p99 %.1f s; "
              "build p50 %.1f s (%d builds), queue p50 %.1f s, execution p50 %.2f s; %d correct;%s\n",
              name, p.verdicts.size(), distinct, p.wall_s, rate, quantile(p.latency_s, 0.5), quantile(p.latency_s, 0.99),
              quantile(build, 0.5), builds, quantile(queue, 0.5), quantile(exec, 0.5), correct, hist.c_str());
  return {{"candidates", p.verdicts.size()}, {"distinct", distinct}, {"seconds", p.wall_s},
          {"distinct_per_min", rate}, {"latency_p50_s", quantile(p.latency_s, 0.5)},
          {"latency_p99_s", quantile(p.latency_s, 0.99)}, {"build_p50_s", quantile(build, 0.5)},
          {"build_p90_s", quantile(build, 0.9)}, {"builds", builds}, {"queue_p50_s", quantile(queue, 0.5)},
          {"exec_p50_s", quantile(exec, 0.5)}, {"exec_p90_s", quantile(exec, 0.9)}, {"correct", correct},
          {"classes", classes}};
}

// Where a pass spent its workers' and executors' time: seconds per phase since `before`, summed
// over threads (with w workers busy, a phase can sum to w times the wall clock).
nlohmann::json report_phases(const judge::Judge& judge, const std::map<std::string, PhaseTotals::Total>& before) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, t] : judge.phases()) {
    auto it = before.find(name);
    const double s = t.seconds - (it == before.end() ? 0.0 : it->second.seconds);
    const long n = t.count - (it == before.end() ? 0 : it->second.count);
    if (n <= 0) continue;
    std::printf("      %-58s %8.1f s in %4ld, mean %6.2f s\n", name.c_str(), s, n, s / static_cast<double>(n));
    out[name] = {{"seconds", s}, {"count", n}};
  }
  return out;
}

void run(const BenchJudgeArgs& a) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines as they come, also into a pipe
  auto cfg = config::load<judge::JudgeConfig>(config::load_tree(a.config_path, a.sets));
  cfg.timing = cfg.timing || a.timing;  // the judge's default (correctness only: the exec reward) unless asked
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
  // distinct candidates: each solution and its variants; then --dup copies of the whole list
  std::vector<std::pair<const judge::Task*, std::string>> distinct;
  for (const auto* t : chosen) {
    distinct.emplace_back(t, t->solution);
    for (int k = 0; k < a.variants; ++k) distinct.emplace_back(t, make_variant(t->solution, k));
  }
  std::vector<judge::Job> jobs;
  for (int d = 0; d < a.dup; ++d)
    for (const auto& [t, code] : distinct) jobs.push_back({t, code, true});
  std::printf("bench judge: %zu candidates (%zu tasks, %d variant(s) each, %zu distinct, x%d) from %s, %s, "
              "toolchain %s\n",
              jobs.size(), chosen.size(), a.variants, distinct.size(), a.dup, tasks_path.c_str(), cuda ? "cuda" : "cpu",
              judge.toolchain().c_str());
  std::printf("settings: %d compile workers, %d executors, %d trials, timing %s, fast_build %d\n",
              judge.config().compile_workers, judge.config().executors, cfg.trials,
              cfg.timing ? str(cfg.warmup, " warm-up + ", cfg.iters, " timed calls").c_str() : "off (the judge's default)",
              cfg.fast_build ? 1 : 0);
  if (!a.write_candidates.empty()) {
    std::string text;
    for (const auto& j : jobs) text += nlohmann::json{{"task_id", j.task->id}, {"code", j.text}}.dump() + "\n";
    fs::write_file(a.write_candidates, text);
    std::printf("candidates written to %s (dice judge --tasks %s --candidates %s)\n", a.write_candidates.c_str(),
                tasks_path.c_str(), a.write_candidates.c_str());
  }
  nlohmann::json report;
  report["settings"] = {{"compile_workers", judge.config().compile_workers}, {"executors", judge.config().executors},
                        {"trials", cfg.trials}, {"timing", cfg.timing}, {"warmup", cfg.warmup}, {"iters", cfg.iters},
                        {"fast_build", cfg.fast_build}};

  // 1. cold: every distinct candidate builds. The precompiled headers and the fast builder's
  // recipe are made once per toolchain and cache (they persist with judge.cache_root): timed apart.
  if (cfg.precompiled_header) {
    Timer pt;
    std::string dir = judge.wait_for_pch();
    std::printf("once per toolchain and cache: precompiled headers and build recipe %s in %.1f s\n",
                dir.empty() ? "NOT available" : "ready", pt.elapsed_s());
    report["pch"] = {{"ready", !dir.empty()}, {"seconds", pt.elapsed_s()}};
  }
  const int fast0 = judge.fast_builds(), fall0 = judge.build_fallbacks(), plain0 = judge.plain_builds();
  const auto phases0 = judge.phases();
  Pass cold = judge_pass(judge, jobs, "cold");
  report["cold"] = report_pass("cold:", cold, distinct.size());
  report["cold"]["phases"] = report_phases(judge, phases0);
  report["cold"]["fast_builds"] = judge.fast_builds() - fast0;
  report["cold"]["fallbacks"] = judge.build_fallbacks() - fall0;
  report["cold"]["plain_builds"] = judge.plain_builds() - plain0;
  std::printf("      builds by the fast builder: %d; by the plain load_inline build: %d (%d handed over by the fast builder)\n",
              judge.fast_builds() - fast0, judge.plain_builds() - plain0, judge.build_fallbacks() - fall0);
  for (size_t i = 0; i < cold.verdicts.size(); ++i)
    if (!cold.verdicts[i].correct)
      std::printf("  not correct: candidate %zu (%s): %s: %s\n", i, jobs[i].task->id.c_str(),
                  judge::failure_name(cold.verdicts[i].failure), cold.verdicts[i].log_tail.substr(0, 300).c_str());
  // 2. warm: the same candidates, their builds in the cache: what execution alone allows
  if (a.warm) {
    const auto phases1 = judge.phases();
    Pass warm = judge_pass(judge, jobs, "warm");
    report["warm"] = report_pass("warm:", warm, distinct.size());
    report["warm"]["phases"] = report_phases(judge, phases1);
    int agree = 0;
    for (size_t i = 0; i < jobs.size(); ++i) agree += warm.verdicts[i].correct == cold.verdicts[i].correct;
    std::printf("      cold and warm verdicts agree on %d/%zu\n", agree, jobs.size());
    report["warm"]["agree_with_cold"] = agree;
  }
  const auto& verdicts = cold.verdicts;

  // 3. KernelBench-style: one process per candidate, reference first, build in place, no cache
  size_t nb = a.baseline < 0 ? jobs.size() : std::min(jobs.size(), static_cast<size_t>(a.baseline));
  if (nb > 0) {
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
    double base_rate = 60.0 * static_cast<double>(nb) / base_s;
    judge::remove_tree(root);
    const double judge_rate = 60.0 * static_cast<double>(distinct.size()) / cold.wall_s;
    std::printf("one-by-one: %zu candidates in %.1f s = %.2f candidates/min; %d correct; the judge (cold, distinct) "
                "%.1fx; verdicts agree on %d/%zu\n",
                nb, base_s, base_rate, base_correct, judge_rate / base_rate, agree, nb);
    report["one_by_one"] = {{"candidates", nb}, {"seconds", base_s}, {"candidates_per_min", base_rate},
                            {"correct", base_correct}, {"verdicts_agree", agree}};
    report["ratio_distinct"] = judge_rate / base_rate;
  }

  if (a.build_variants) bench_build_variants(judge, chosen[0]->solution, report);
  if (!a.out.empty()) fs::write_file(a.out, report.dump(2) + "\n");
}

void setup_judge(CLI::App& cmd) {
  auto a = std::make_shared<BenchJudgeArgs>();
  cmd.add_option("-c,--config", a->config_path, "YAML config file")->check(CLI::ExistingFile);
  cmd.add_option("--set", a->sets, "override a config key: --set a.b=value (repeatable)")->take_all();
  cmd.add_option("--tasks", a->tasks, "task set with solutions (default: built-in cpu/cuda set)");
  cmd.add_option("--n-tasks", a->n_tasks, "tasks whose solutions are used (default: all)");
  cmd.add_option("--variants", a->variants, "distinct variants the bench makes of each solution");
  cmd.add_option("--dup", a->dup, "copies of each distinct candidate (duplicates in RL groups)");
  cmd.add_option("--baseline", a->baseline, "candidates also evaluated one by one, KernelBench-style (-1 = all)");
  cmd.add_option("--warm", a->warm, "also judge the same candidates again from the warm build cache");
  cmd.add_flag("--timing", a->timing, "also time every candidate (judge.timing=true; the default judges correctness only)");
  cmd.add_option("--write-candidates", a->write_candidates, "write the candidates as dice judge input (JSONL)");
  cmd.add_flag("--build-variants", a->build_variants, "also time one cold build per compile variant");
  cmd.add_option("--out", a->out, "write the numbers as JSON");
  cmd.callback([a] { run(*a); });
}

}  // namespace

BenchSuite judge_suite() {
  return {"judge",
          "judge throughput vs a KernelBench-style one-by-one evaluation (same candidates)",
          setup_judge};
}

}  // namespace dice::bench
