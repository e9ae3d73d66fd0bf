// `dice train`: BiC-RL (kernel infilling, then end-to-end) with learner and actor ranks.
//   dice train -c configs/train/quickstart.yaml [--set k=v] [--out DIR] [--resume auto|never|CKPT]
//   dice train plot RUN_DIR [--out DIR]        metrics.jsonl -> PNG curves (also `dice sft plot`)
// Under mpirun/srun: dist.colocated (every rank both roles) or dist.num_learners learners + actors.
#include <cstdio>
#include <iostream>

#include "dice/config/config.h"
#include "dice/dist/world.h"
#include "dice/judge/judge.h"
#include "dice/train/eval_runner.h"
#include "dice/train/rl_trainer.h"
#include "dice/util/error.h"
#include "dice/util/log.h"
#include "subcommand.h"

namespace dice::app {

int plot_run(const std::string& run, const std::string& out) {
  std::string cmd = "'" + judge::default_python() + "' '" + train::project_root() + "/tools/plot_metrics.py' '" + run + "'";
  if (!out.empty()) cmd += " --out '" + out + "'";
  return std::system(cmd.c_str());
}

void add_plot_subcommand(CLI::App& cmd) {
  cmd.require_subcommand(0, 1);
  auto plot = cmd.add_subcommand("plot", "draw a run's metrics.jsonl as PNG curves");
  auto run = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  plot->add_option("run", *run, "run directory")->required()->check(CLI::ExistingDirectory);
  plot->add_option("--out", *out, "where to write the PNGs (default RUN/plots)");
  plot->callback([run, out] {
    if (plot_run(*run, out->empty() ? *run + "/plots" : *out) != 0) throw Error("plotting failed");
  });
}

namespace {

struct TrainArgs {
  ConfigArgs cfg;
  std::string out, resume = "auto", model;
  int64_t steps = 0;
  bool print_config = false;
};

void run_train_cmd(const TrainArgs& a) {
  std::vector<std::string> sets = a.cfg.sets;
  if (!a.out.empty()) sets.push_back("out=" + a.out);
  if (!a.model.empty()) sets.push_back("model=" + a.model);
  const YAML::Node tree = config::load_tree(a.cfg.config_path, sets);
  for (const auto& [old_key, key] : train::renamed_keys()) {  // section.key: spelt so by earlier releases
    const auto dot = old_key.find('.');
    const YAML::Node section = tree.IsMap() ? tree[old_key.substr(0, dot)] : YAML::Node();
    DICE_REQUIRE(!(section && section.IsMap() && section[old_key.substr(dot + 1)]), "config key '", old_key,
                 "' is now '", key, "' (as in dice sft); rename it.");
  }
  auto cfg = config::load<train::RlRunConfig>(tree);
  if (a.steps > 0) {
    // --steps N: the first stages, cut so that the run has N steps in all.
    int64_t left = a.steps;
    std::vector<train::StageConfig> kept;
    for (auto s : cfg.stages) {
      if (left <= 0) break;
      s.steps = std::min(s.steps, left);
      left -= s.steps;
      kept.push_back(s);
    }
    cfg.stages = kept;
  }
  cfg.validate();
  const std::string resolved = config::dump(config::to_yaml(cfg));
  dist::WorldOptions wo;
  wo.colocated = cfg.dist.colocated;
  wo.num_learners = cfg.dist.num_learners;
  wo.timeout_s = cfg.dist.timeout_s;
  dist::World world(nullptr, nullptr, wo);
  if (a.print_config) {  // what would run, then nothing runs
    if (world.is_root()) std::cout << resolved << std::flush;
    return;
  }
  auto r = train::run_train(cfg, a.resume, resolved, world);
  if (!world.is_root()) return;
  if (r.first_step > r.last_step) {  // resumed from the last step: nothing ran
    std::printf("\ntrain: all %lld steps were done before this run (resumed from %s); nothing to do\n",
                static_cast<long long>(cfg.total_steps()), cfg.out.c_str());
    return;
  }
  std::printf("\ntrain: steps %lld..%lld done; reward_mean per step:", static_cast<long long>(r.first_step),
              static_cast<long long>(r.last_step));
  for (double x : r.reward_mean) std::printf(" %.3f", x);
  std::printf("\ntrain: metrics %s/metrics.jsonl, rollouts %s/rollouts/, last checkpoint %s\n", cfg.out.c_str(),
              cfg.out.c_str(), r.last_checkpoint.empty() ? "(none this run)" : r.last_checkpoint.c_str());
  if (plot_run(cfg.out, cfg.out + "/plots") != 0) log::warn("train: plotting failed (tools/plot_metrics.py)");
}

void setup_train(CLI::App& cmd) {
  auto a = std::make_shared<TrainArgs>();
  a->cfg.add_to(cmd);
  cmd.add_option("--out", a->out, "run directory (overrides out)");
  cmd.add_option("--model", a->model, "starting model: HF folder or checkpoint (overrides model)");
  cmd.add_option("--resume", a->resume, "auto (latest complete checkpoint in --out), never, or a checkpoint dir");
  cmd.add_option("--steps", a->steps, "run only the first N steps (stages cut in order)");
  cmd.add_flag("--print-config", a->print_config, "print the resolved config and exit");
  add_plot_subcommand(cmd);
  cmd.callback([a, &cmd] {
    if (cmd.get_subcommands().empty()) run_train_cmd(*a);
  });
}

}  // namespace

DICE_SUBCOMMAND("train", "BiC-RL training (TraceRL) with learner and actor ranks", setup_train);

}  // namespace dice::app
