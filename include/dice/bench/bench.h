#pragma once
// The performance suites of `dice bench <suite>` (run them on the GPU node), a module of their own
// so that the shipped command's core holds none of their code: each src/bench/<suite>.cpp gives its
// suite (name, description, setup); setup(CLI::App&) adds options and a callback that prints
// results (and ratios to a peer measured in the same run).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace c10 {
struct Device;
}

namespace dice::bench {

struct BenchSuite {
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
};

// Every suite, by name.
std::vector<BenchSuite> suites();

BenchSuite judge_suite();
BenchSuite learner_suite();
BenchSuite sample_suite();
BenchSuite tokenizer_suite();

// CUDA where this build and machine have it, else the CPU (the device every suite measures on).
c10::Device bench_device();
// "a,b,,c" -> {a, b, c}: a comma-separated option's items.
std::vector<std::string> split_list(const std::string& s);

// Runs a peer's shell command, returns its stdout; throws a sentence naming `who` when it fails.
std::string run_capture(const std::string& cmd, const std::string& who);
// The last line of `out` that starts with '{', parsed (a peer prints its result as one JSON line).
nlohmann::json last_json_line(const std::string& out, const std::string& who);

}  // namespace dice::bench
