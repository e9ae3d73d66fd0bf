// `dice eval`: offline checkpoint evaluation with KernelBench metrics and a report.
//   dice eval --checkpoint PATH --tasks FILE|--kernelbench DIR [--levels 1,2] --out DIR
//   dice eval report --compare DIR... --out DIR      tables side by side
//   dice eval baseline --tasks FILE --out FILE       reference timings for this GPU model
// Run it under mpirun/srun for several GPUs: tasks are sharded, results gathered on rank 0.
#include <iostream>

#include "dice/config/config.h"
#include "dice/dist/world.h"
#include "dice/train/eval_report.h"
#include "dice/train/eval_runner.h"
#include "dice/util/log.h"
#include "dice/util/run_dir.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct EvalArgs {
  ConfigArgs cfg;
  std::string checkpoint, tasks, kernelbench, out, responses, baseline, levels, prompt_template;
  int samples = 0;
  double temperature = -1;
  bool samples_given = false, temperature_given = false;
  bool use_solutions = false;
  bool print_config = false;
  bool fresh = false, continue_anyway = false;
};

void run_eval_cmd(const EvalArgs& a) {
  // Flags become overrides on top of the config file, so they are validated like config keys.
  std::vector<std::string> sets = a.cfg.sets;
  auto set = [&](const std::string& k, const std::string& v) { sets.push_back(k + "=" + v); };
  if (!a.checkpoint.empty()) set("checkpoint", a.checkpoint);
  if (!a.tasks.empty()) set("tasks", a.tasks);
  if (!a.kernelbench.empty()) set("kernelbench", a.kernelbench);
  if (!a.out.empty()) set("out", a.out);
  if (!a.responses.empty()) set("responses", a.responses);
  if (!a.baseline.empty()) set("baseline", a.baseline);
  if (!a.levels.empty()) set("levels", "[" + a.levels + "]");
  if (!a.prompt_template.empty()) set("prompt_template", a.prompt_template);
  DICE_REQUIRE(!a.samples_given || a.samples >= 1, "--samples must be >= 1 (samples per task), got ", a.samples, ".");
  DICE_REQUIRE(!a.temperature_given || a.temperature >= 0, "--temperature must be >= 0 (0 = greedy), got ",
               a.temperature, ".");
  const auto on_mismatch = run_dir::on_mismatch_from_flags(a.fresh, a.continue_anyway);
  if (a.samples_given) set("samples", std::to_string(a.samples));
  if (a.temperature_given) {
    set("sampler.temperature", std::to_string(a.temperature));
    set("sampler.top_k", a.temperature > 0 ? "0" : "1");
  }
  if (a.use_solutions) set("use_solutions", "true");
  auto tree = config::load_tree(a.cfg.config_path, sets);
  auto cfg = config::load<train::EvalConfig>(tree);

  dist::World world(nullptr, nullptr);
  if (a.print_config) {  // what would run, then nothing runs
    if (world.is_root()) std::cout << config::dump(config::to_yaml(cfg)) << std::flush;
    return;
  }
  auto result = train::run_eval(cfg, world, on_mismatch);  // writes config.yaml once the checks pass
  if (world.is_root()) std::cout << "\n" << result.report_md;
}

void setup_eval(CLI::App& cmd) {
  auto a = std::make_shared<EvalArgs>();
  a->cfg.add_to(cmd);
  cmd.add_option("--checkpoint", a->checkpoint, "HF folder, checkpoint dir (step_N) or run dir (latest complete)");
  cmd.add_option("--tasks", a->tasks, "task JSONL");
  cmd.add_option("--kernelbench", a->kernelbench, "KernelBench checkout (instead of --tasks)");
  cmd.add_option("--levels", a->levels, "levels, e.g. 1,2,3");
  cmd.add_option("--out", a->out, "result folder (a rerun resumes)");
  cmd.add_option("--samples", a->samples, "samples per task (pass@k)")->each([a](const std::string&) {
    a->samples_given = true;
  });
  cmd.add_option("--temperature", a->temperature, "sampling temperature (0 = greedy, the default protocol)")
      ->each([a](const std::string&) { a->temperature_given = true; });
  cmd.add_flag("--fresh", a->fresh, "the result folder holds other results: delete them and start over");
  cmd.add_flag("--continue-anyway", a->continue_anyway,
               "resume although the result folder was made with another checkpoint, tasks or settings");
  cmd.add_option("--prompt-template", a->prompt_template,
                 "prompt template file (e.g. one made from DICE's evaluation prompt; see docs/eval-protocol.md)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--responses", a->responses, "judge responses from this JSONL instead of sampling");
  cmd.add_flag("--use-solutions", a->use_solutions, "judge the tasks' honest solutions (pipeline check)");
  cmd.add_option("--baseline", a->baseline, "baseline timing file from `dice eval baseline`");
  cmd.add_flag("--print-config", a->print_config, "print the resolved config and exit");
  cmd.require_subcommand(0, 1);

  auto report = cmd.add_subcommand("report", "rebuild a report, or compare result folders side by side");
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto report_out = std::make_shared<std::string>();
  report->add_option("--compare", *dirs, "result folders")->required()->check(CLI::ExistingDirectory);
  report->add_option("--out", *report_out, "where to write compare.md / compare.json")->required();
  report->callback([dirs, report_out] { std::cout << train::compare_reports(*dirs, *report_out); });

  auto baseline = cmd.add_subcommand("baseline", "time the reference of every task on this machine's GPU model");
  auto b = std::make_shared<EvalArgs>();
  b->cfg.add_to(*baseline);
  baseline->add_option("--tasks", b->tasks, "task JSONL")->required();
  baseline->add_option("--out", b->out, "baseline JSON file to write")->required();
  baseline->callback([b] {
    auto cfg = config::load<train::EvalConfig>(config::load_tree(b->cfg.config_path, b->cfg.sets));
    cfg.tasks = b->tasks;
    dist::World world(nullptr, nullptr);
    train::write_baseline(cfg, world, b->out);
  });

  cmd.callback([a, &cmd] {
    if (cmd.get_subcommands().empty()) run_eval_cmd(*a);
  });
}

}  // namespace

DICE_SUBCOMMAND("eval", "evaluate a checkpoint on kernel tasks (KernelBench metrics, report)", setup_eval);

}  // namespace dice::app
