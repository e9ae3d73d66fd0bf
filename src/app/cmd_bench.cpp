// `dice bench`: the performance suite. Suites live in bench_<suite>.cpp (run them on the GPU node).
#include <algorithm>

#include "bench.h"
#include "subcommand.h"

namespace dice::app {

std::vector<BenchSuite>& bench_suites() {
  static std::vector<BenchSuite> s;
  return s;
}

namespace {
void setup_bench(CLI::App& cmd) {
  cmd.require_subcommand(1);
  auto suites = bench_suites();
  std::sort(suites.begin(), suites.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& s : suites) s.setup(*cmd.add_subcommand(s.name, s.description));
}
}  // namespace

DICE_SUBCOMMAND("bench", "performance suite (tokenizer, sample, judge, ...): prints ratios to peers", setup_bench);

}  // namespace dice::app
