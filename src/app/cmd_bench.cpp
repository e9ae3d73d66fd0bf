// `dice bench`: the performance suite. Suites live in bench_<suite>.cpp (run them on the GPU node).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "bench.h"
#include "dice/util/error.h"
#include "subcommand.h"

namespace dice::app {

std::vector<BenchSuite>& bench_suites() {
  static std::vector<BenchSuite> s;
  return s;
}

std::string run_capture(const std::string& cmd, const std::string& who) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  DICE_REQUIRE(f, "Could not start: ", cmd);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  int rc = pclose(f);
  DICE_REQUIRE(rc == 0, who, " failed (exit ", rc, "): ", cmd, "\n", out);
  return out;
}

nlohmann::json last_json_line(const std::string& out, const std::string& who) {
  std::istringstream is(out);
  std::string line, last;
  while (std::getline(is, line))
    if (!line.empty() && line[0] == '{') last = line;
  DICE_REQUIRE(!last.empty(), who, " printed no JSON result:\n", out);
  return nlohmann::json::parse(last);
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
