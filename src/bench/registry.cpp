// The suites of `dice bench`, and what their peers' runs share.
#include <cstdio>
#include <sstream>

#include "dice/bench/bench.h"
#include "dice/util/error.h"

namespace dice::bench {

std::vector<BenchSuite> suites() { return {judge_suite(), learner_suite(), sample_suite(), tokenizer_suite()}; }

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

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::string cur;
  for (char ch : s + ",") {
    if (ch == ',') {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return v;
}

nlohmann::json last_json_line(const std::string& out, const std::string& who) {
  std::istringstream is(out);
  std::string line, last;
  while (std::getline(is, line))
    if (!line.empty() && line[0] == '{') last = line;
  DICE_REQUIRE(!last.empty(), who, " printed no JSON result:\n", out);
  return nlohmann::json::parse(last);
}

}  // namespace dice::bench
