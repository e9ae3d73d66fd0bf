// `dice sft`: supervised fine-tuning with the block-diffusion objective (CuKe SFT before BiC-RL).
//   dice sft -c configs/sft/quickstart.yaml [--set k=v] [--model DIR] [--data FILE] [--out DIR]
//            [--resume auto|never|CKPT] [--steps N]
//   dice sft plot RUN_DIR [--out DIR]          metrics.jsonl -> PNG curves
// Under mpirun/srun every rank is a data-parallel learner.
#include <cstdio>
#include <iostream>

#include "dice/config/config.h"
#include "dice/dist/world.h"
#include "dice/train/sft.h"
#include "dice/util/error.h"
#include "dice/util/log.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct SftArgs {
  ConfigArgs cfg;
  std::string out, resume = "auto", model, data;
  int64_t steps = 0;
  bool print_config = false;
};

void run_sft_cmd(const SftArgs& a) {
  std::vector<std::string> sets = a.cfg.sets;
  if (!a.out.empty()) sets.push_back("out=" + a.out);
  if (!a.model.empty()) sets.push_back("model=" + a.model);
  if (!a.data.empty()) sets.push_back("data.path=" + a.data);
  if (a.steps > 0) sets.push_back("max_steps=" + std::to_string(a.steps));
  const YAML::Node tree = config::load_tree(a.cfg.config_path, sets);
  // the keys of earlier releases, now spelt as `dice train` spells the same knobs
  static const std::pair<const char*, const char*> renamed[] = {
      {"ckpt_every", "ckpt.every"}, {"keep_last", "ckpt.keep_last"}, {"timeout_s", "dist.timeout_s"}};
  if (tree.IsMap()) {
    for (const auto& [old_key, key] : renamed)
      DICE_REQUIRE(!tree[old_key], "config key '", old_key, "' is now '", key, "' (as in dice train); rename it.");
    DICE_REQUIRE(!(tree["optim"] && tree["optim"].IsMap() && tree["optim"]["bucket_mb"]),
                 "config key 'optim.bucket_mb' is now 'dist.bucket_mb' (as in dice train); rename it.");
  }
  auto cfg = config::load<train::SftRunConfig>(tree);
  cfg.validate();
  const std::string resolved = config::dump(config::to_yaml(cfg));
  dist::WorldOptions wo;
  wo.timeout_s = cfg.dist.timeout_s;
  dist::World world(nullptr, nullptr, wo);
  if (a.print_config) {  // what would run, then nothing runs
    if (world.is_root()) std::cout << resolved << std::flush;
    return;
  }
  auto r = train::run_sft(cfg, a.resume, resolved, world);
  if (!world.is_root()) return;
  if (r.first_step > r.last_step) {  // resumed from the last step: nothing ran
    std::printf("\nsft: all %lld steps were done before this run (resumed from %s); nothing to do\n",
                static_cast<long long>(r.total_steps), cfg.out.c_str());
    return;
  }
  std::printf("\nsft: steps %lld..%lld of %lld done; ce_masked per step:", static_cast<long long>(r.first_step),
              static_cast<long long>(r.last_step), static_cast<long long>(r.total_steps));
  for (double x : r.ce_masked) std::printf(" %.3f", x);
  std::printf("\nsft: metrics %s/metrics.jsonl, last checkpoint %s\n", cfg.out.c_str(),
              r.last_checkpoint.empty() ? "(none this run)" : r.last_checkpoint.c_str());
  if (plot_run(cfg.out, cfg.out + "/plots") != 0) log::warn("sft: plotting failed (tools/plot_metrics.py)");
}

void setup_sft(CLI::App& cmd) {
  auto a = std::make_shared<SftArgs>();
  a->cfg.add_to(cmd);
  cmd.add_option("--out", a->out, "run directory (overrides out)");
  cmd.add_option("--model", a->model, "starting model: HF folder or checkpoint (overrides model)");
  cmd.add_option("--data", a->data, "SFT examples (overrides data.path)");
  cmd.add_option("--resume", a->resume, "auto (latest complete checkpoint in --out), never, or a checkpoint dir");
  cmd.add_option("--steps", a->steps, "stop after step N (overrides max_steps; the schedule is unchanged)");
  cmd.add_flag("--print-config", a->print_config, "print the resolved config and exit");
  add_plot_subcommand(cmd);
  cmd.callback([a, &cmd] {
    if (cmd.get_subcommands().empty()) run_sft_cmd(*a);
  });
}

}  // namespace

DICE_SUBCOMMAND("sft", "supervised fine-tuning (block-diffusion objective) before RL, data-parallel over ranks", setup_sft);

}  // namespace dice::app
