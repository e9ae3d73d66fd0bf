// `dice tasks`: import, inspect and filter task sets (DESIGN §4 "Tasks").
//   import  --kernelbench DIR [--levels 1,2,3] | --dice-rl FILE | --cuke FILE, then --out F
//   stats   F                    counts per level and device, difficulty range, infill / solution
//   show    F ID                 prints one task
//   filter  F [--levels ..] [--min-difficulty x] [--max-difficulty x] [--device cpu|cuda]
//             [--with-solution] [--with-infill] [--limit N] --out F2
//   lint    F [--device cpu|cuda]     static checks on every task's solution (honest sets: no findings)
//   metrics F VERDICTS [--fast-p 0,1,2] [--pass-k 1,5,10] [--out M.json]   KernelBench metrics
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

#include "dice/judge/metrics.h"
#include <nlohmann/json.hpp>
#include "dice/judge/static_check.h"
#include "dice/judge/task.h"
#include "dice/util/fs.h"
#include "dice/util/error.h"
#include "subcommand.h"

namespace dice::app {
namespace {

using judge::Task;

struct ImportArgs {
  std::string kernelbench, dice_rl, cuke, out;
  std::vector<int> levels = {1, 2, 3};
};

void run_import(const ImportArgs& a) {
  const int sources = !a.kernelbench.empty() + !a.dice_rl.empty() + !a.cuke.empty();
  DICE_REQUIRE(sources == 1, "dice tasks import needs exactly one of --kernelbench DIR, --dice-rl FILE, --cuke FILE");
  std::vector<Task> tasks;
  std::string what;
  if (!a.kernelbench.empty()) {
    tasks = judge::import_kernelbench(a.kernelbench, a.levels);
    what = "KernelBench " + a.kernelbench;
  } else if (!a.dice_rl.empty()) {
    tasks = judge::import_dice_rl(a.dice_rl);
    what = "DICE rl_data " + a.dice_rl;
  } else {
    int skipped = 0;
    tasks = judge::import_cuke(a.cuke, &skipped);
    what = str("CuKe ", a.cuke, " (", skipped, " record(s) without a PyTorch reference skipped)");
  }
  DICE_REQUIRE(!tasks.empty(), "no tasks found in ", what);
  judge::save_tasks(a.out, tasks);
  std::printf("wrote %zu tasks from %s to %s\n", tasks.size(), what.c_str(), a.out.c_str());
}

void print_stats(const std::string& path) {
  const auto tasks = judge::load_tasks(path);
  std::printf("%s: %zu tasks\n", path.c_str(), tasks.size());
  if (tasks.empty()) return;
  struct Row {
    long n = 0, infill = 0, solution = 0, cpu = 0, cuda = 0;
    double dmin = 1e300, dmax = -1e300;
  };
  std::map<int, Row> rows;
  Row total;
  for (const auto& t : tasks) {
    for (Row* r : {&rows[t.level], &total}) {
      ++r->n;
      r->infill += t.infill.has_value();
      r->solution += !t.solution.empty();
      (t.device == "cpu" ? r->cpu : r->cuda)++;
      r->dmin = std::min(r->dmin, t.difficulty);
      r->dmax = std::max(r->dmax, t.difficulty);
    }
  }
  std::printf("%-8s %6s %10s %10s %8s %8s %6s %6s\n", "level", "tasks", "diff_min", "diff_max", "infill", "solution", "cpu",
              "cuda");
  auto line = [](const std::string& name, const Row& r) {
    std::printf("%-8s %6ld %10.4g %10.4g %8ld %8ld %6ld %6ld\n", name.c_str(), r.n, r.dmin, r.dmax, r.infill, r.solution,
                r.cpu, r.cuda);
  };
  for (const auto& [level, r] : rows) line(std::to_string(level), r);
  line("all", total);
}

void show_task(const std::string& path, const std::string& id) {
  const auto tasks = judge::load_tasks(path);
  auto it = std::find_if(tasks.begin(), tasks.end(), [&](const Task& t) { return t.id == id; });
  DICE_REQUIRE(it != tasks.end(), "no task '", id, "' in ", path, " (", tasks.size(), " tasks; list them with `dice tasks stats`)");
  std::cout << "id:         " << it->id << "\nlevel:      " << it->level << "\ndifficulty: " << it->difficulty
            << "\ndevice:     " << it->device << "\n\n--- reference ---\n"
            << it->reference << (it->reference.empty() || it->reference.back() == '\n' ? "" : "\n");
  if (it->infill) {
    std::cout << "\n--- infill prefix ---\n" << it->infill->prefix << "\n--- infill suffix ---\n" << it->infill->suffix << "\n";
  }
  if (!it->solution.empty()) std::cout << "\n--- solution ---\n" << it->solution << "\n";
}

struct FilterArgs {
  std::string in, out, device;
  std::vector<int> levels;
  double min_difficulty = -1e300, max_difficulty = 1e300;
  bool with_solution = false, with_infill = false;
  long limit = -1;
};

void run_filter(const FilterArgs& a) {
  DICE_REQUIRE(a.device.empty() || a.device == "cpu" || a.device == "cuda", "--device must be cpu or cuda, got '",
               a.device, "'");
  const auto tasks = judge::load_tasks(a.in);
  std::vector<Task> kept;
  for (const auto& t : tasks) {
    if (!a.levels.empty() && std::find(a.levels.begin(), a.levels.end(), t.level) == a.levels.end()) continue;
    if (t.difficulty < a.min_difficulty || t.difficulty > a.max_difficulty) continue;
    if (!a.device.empty() && t.device != a.device) continue;
    if (a.with_solution && t.solution.empty()) continue;
    if (a.with_infill && !t.infill) continue;
    if (a.limit >= 0 && static_cast<long>(kept.size()) >= a.limit) break;
    kept.push_back(t);
  }
  judge::save_tasks(a.out, kept);
  std::printf("kept %zu of %zu tasks -> %s\n", kept.size(), tasks.size(), a.out.c_str());
}

// Static checks on each solution with the default modes; exits non-zero (an Error) on any reject.
void run_lint(const std::string& path, const std::string& device) {
  long with_solution = 0, flagged = 0, rejected = 0;
  for (const auto& t : judge::load_tasks(path)) {
    if (t.solution.empty()) continue;
    ++with_solution;
    const auto findings = judge::static_check(t.solution, device.empty() ? t.device : device,
                                              judge::StaticCheckConfig{}.for_level(t.level));
    if (findings.empty()) continue;
    ++flagged;
    rejected += judge::has_reject(findings);
    for (const auto& f : findings)
      std::printf("%s: %s %s: %s\n", t.id.c_str(), f.severity.c_str(), f.check.c_str(), f.detail.c_str());
  }
  std::printf("%ld solutions checked, %ld with findings, %ld rejected\n", with_solution, flagged, rejected);
  DICE_REQUIRE(rejected == 0, rejected, " solution(s) in ", path, " fail the static checks (see above)");
}

struct MetricsArgs {
  std::string tasks, verdicts, out;
  judge::MetricsOptions opts;
};

void run_metrics(const MetricsArgs& a) {
  const auto tasks = judge::load_tasks(a.tasks);
  // load_verdicts fills absent fields with defaults: a file of candidates would pass as failures.
  fs::for_each_line(a.verdicts, [&](int lineno, const std::string& line) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    const bool verdict = !j.is_discarded() && j.is_object() &&
                         ((j.contains("verdict") && j["verdict"].is_object()) || (j.contains("correct") && j.contains("failure")));
    DICE_REQUIRE(verdict, a.verdicts, ":", lineno, ": not a verdict (no 'correct' and 'failure' fields, no 'verdict' ",
                 "object). Is it a candidates file? Judge it first: dice judge --tasks ", a.tasks, " --candidates ",
                 a.verdicts, " --out verdicts.jsonl");
  });
  const auto verdicts = judge::load_verdicts(a.verdicts);
  const auto m = judge::compute_metrics(verdicts, tasks, a.opts);
  std::printf("%s", judge::metrics_summary(m).c_str());
  if (!a.out.empty()) {
    fs::write_file_atomic(a.out, judge::metrics_to_json(m) + "\n");
    std::printf("metrics written to %s\n", a.out.c_str());
  }
}

void setup_tasks(CLI::App& cmd) {
  cmd.require_subcommand(1);

  auto ia = std::make_shared<ImportArgs>();
  auto* imp = cmd.add_subcommand("import", "import a KernelBench checkout, DICE rl_data or CuKe/alpaca JSON as task JSONL");
  imp->add_option("--kernelbench", ia->kernelbench, "KernelBench checkout (or its KernelBench/ folder)")
      ->check(CLI::ExistingDirectory);
  imp->add_option("--levels", ia->levels, "KernelBench levels to import, e.g. 1,2,3")->delimiter(',');
  imp->add_option("--dice-rl", ia->dice_rl, "DICE rl_data JSON (end-to-end or infilling records)")->check(CLI::ExistingFile);
  imp->add_option("--cuke", ia->cuke, "CuKe / alpaca JSON (instruction/input/output or prompt/response)")
      ->check(CLI::ExistingFile);
  imp->add_option("--out", ia->out, "output task JSONL")->required();
  imp->callback([ia] { run_import(*ia); });

  auto sp = std::make_shared<std::string>();
  auto* st = cmd.add_subcommand("stats", "counts per level, difficulty range, tasks with infill / solution");
  st->add_option("file", *sp, "task JSONL")->required()->check(CLI::ExistingFile);
  st->callback([sp] { print_stats(*sp); });

  auto sh = std::make_shared<std::pair<std::string, std::string>>();
  auto* show = cmd.add_subcommand("show", "print one task");
  show->add_option("file", sh->first, "task JSONL")->required()->check(CLI::ExistingFile);
  show->add_option("id", sh->second, "task id")->required();
  show->callback([sh] { show_task(sh->first, sh->second); });

  auto fa = std::make_shared<FilterArgs>();
  auto* flt = cmd.add_subcommand("filter", "select tasks by level, difficulty, device, solution / infill");
  flt->add_option("file", fa->in, "input task JSONL")->required()->check(CLI::ExistingFile);
  flt->add_option("--levels", fa->levels, "keep these levels, e.g. 1,2")->delimiter(',');
  flt->add_option("--min-difficulty", fa->min_difficulty, "keep difficulty >= x");
  flt->add_option("--max-difficulty", fa->max_difficulty, "keep difficulty <= x");
  flt->add_option("--device", fa->device, "keep tasks of this device (cpu or cuda)");
  flt->add_flag("--with-solution", fa->with_solution, "keep tasks that carry a solution");
  flt->add_flag("--with-infill", fa->with_infill, "keep tasks that carry an infill split");
  flt->add_option("--limit", fa->limit, "keep at most N tasks (in file order)");
  flt->add_option("--out", fa->out, "output task JSONL")->required();
  flt->callback([fa] { run_filter(*fa); });

  auto la = std::make_shared<std::pair<std::string, std::string>>();
  auto* lint = cmd.add_subcommand("lint", "run the static checks on every task's solution");
  lint->add_option("file", la->first, "task JSONL")->required()->check(CLI::ExistingFile);
  lint->add_option("--device", la->second, "judge the solutions as this form (default: each task's device)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  lint->callback([la] { run_lint(la->first, la->second); });

  auto ma = std::make_shared<MetricsArgs>();
  auto* met = cmd.add_subcommand("metrics", "KernelBench metrics (exec, fast_p, geomean speedup, pass@k) of verdicts");
  met->add_option("file", ma->tasks, "task JSONL (the denominator: missing samples count as failures)")
      ->required()
      ->check(CLI::ExistingFile);
  met->add_option("verdicts", ma->verdicts, "verdict JSONL (dice judge output, or records with a 'verdict' field)")
      ->required()
      ->check(CLI::ExistingFile);
  met->add_option("--fast-p", ma->opts.fast_p, "speedup thresholds, e.g. 0,1,2")->delimiter(',');
  met->add_option("--pass-k", ma->opts.pass_k, "k values for pass@k, e.g. 1,5,10")->delimiter(',');
  met->add_option("--out", ma->out, "write the metrics as JSON");
  met->callback([ma] { run_metrics(*ma); });
}

}  // namespace

DICE_SUBCOMMAND("tasks", "import / inspect / filter task sets (KernelBench, DICE rl_data, CuKe, built-in)", setup_tasks);

}  // namespace dice::app
