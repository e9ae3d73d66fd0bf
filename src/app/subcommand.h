#pragma once
// Subcommand registry of the `dice` executable: each src/app/cmd_<name>.cpp registers itself with
// DICE_SUBCOMMAND(name, description, setup), where setup(CLI::App&) adds options and a callback.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dice::app {

struct Subcommand {
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
};

std::vector<Subcommand>& subcommands();

// What `dice --version` prints: commit, build type, LibTorch, CUDA and NCCL of this build (version.cpp).
const char* version_text();

struct Registrar {
  Registrar(std::string name, std::string description, std::function<void(CLI::App&)> setup) {
    subcommands().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// Common options: a config file and --set overrides (every subcommand that reads a config).
struct ConfigArgs {
  std::string config_path;
  std::vector<std::string> sets;
  void add_to(CLI::App& cmd) {
    cmd.add_option("-c,--config", config_path, "YAML config file")->check(CLI::ExistingFile);
    cmd.add_option("--set", sets, "override a config key: --set a.b=value (repeatable)")->take_all();
  }
};

// tools/plot_metrics.py over RUN/metrics.jsonl (returns its exit status).
int plot_run(const std::string& run, const std::string& out);
// `<cmd> plot RUN [--out DIR]` (dice train, dice sft); the parent then needs no other subcommand.
void add_plot_subcommand(CLI::App& cmd);

}  // namespace dice::app

#define DICE_SUBCOMMAND_CAT2(a, b) a##b
#define DICE_SUBCOMMAND_CAT(a, b) DICE_SUBCOMMAND_CAT2(a, b)
#define DICE_SUBCOMMAND(name, description, setup) \
  static ::dice::app::Registrar DICE_SUBCOMMAND_CAT(dice_registrar_, __COUNTER__)(name, description, setup)
