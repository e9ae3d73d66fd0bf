#pragma once
// `dice bench <suite>`: each src/app/bench_<suite>.cpp registers a suite with
// DICE_BENCH(name, description, setup); setup(CLI::App&) adds options and a callback that prints
// results (and ratios to a peer measured in the same run).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dice::app {

struct BenchSuite {
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
};

std::vector<BenchSuite>& bench_suites();

// Runs a peer's shell command, returns its stdout; throws a sentence naming `who` when it fails.
std::string run_capture(const std::string& cmd, const std::string& who);
// The last line of `out` that starts with '{', parsed (a peer prints its result as one JSON line).
nlohmann::json last_json_line(const std::string& out, const std::string& who);

struct BenchRegistrar {
  BenchRegistrar(std::string name, std::string description, std::function<void(CLI::App&)> setup) {
    bench_suites().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace dice::app

#define DICE_BENCH_CAT2(a, b) a##b
#define DICE_BENCH_CAT(a, b) DICE_BENCH_CAT2(a, b)
#define DICE_BENCH(name, description, setup) \
  static ::dice::app::BenchRegistrar DICE_BENCH_CAT(dice_bench_registrar_, __LINE__)(name, description, setup)
