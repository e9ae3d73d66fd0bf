// metrics.jsonl's fields are named in one place (metric_fields.h): a misspelt field fails a run
// under DICE_STRICT_METRICS=1 (as the tests run) before anything is written.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dice/train/metric_fields.h"
#include "dice/train/run_plan.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::train {
namespace {

int lines_of(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string l; std::getline(f, l);) n += !l.empty();
  return n;
}

TEST(MetricFields, EachNamedOnceWithItsMeaning) {
  std::set<std::string> seen;
  for (const auto& f : metric_fields()) {
    EXPECT_TRUE(seen.insert(f.name).second) << f.name << " is listed twice";
    EXPECT_GT(std::string(f.help).size(), 3u) << f.name;
  }
  for (const char* name : {"step", "time", "elapsed_s", "pass_rate", "reward_mean", "loss", "ce_masked", "time_step_s"})
    EXPECT_TRUE(is_metric_field(name)) << name;
  EXPECT_FALSE(is_metric_field("pas_rate"));
}

TEST(MetricFields, MisspeltFieldFailsUnderStrictAndNothingIsWritten) {
  const std::string dir = fs::make_temp_dir("dice_metric_fields_");
  ASSERT_EQ(setenv("DICE_STRICT_METRICS", "1", 1), 0);
  MetricsLog log;
  log.open(dir, 0);
  nlohmann::json good = {{"step", 1}, {"pass_rate", 0.5}, {"failures", {{"compile_error", 2}}}};
  log.write(good);
  nlohmann::json typo = {{"step", 2}, {"pas_rate", 0.5}};
  try {
    log.write(typo);
    ADD_FAILURE() << "a record with 'pas_rate' was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'pas_rate'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lines_of(dir + "/metrics.jsonl"), 1);

  // without the setting (a user's run) the record is kept, with a warning
  ASSERT_EQ(setenv("DICE_STRICT_METRICS", "0", 1), 0);
  MetricsLog lenient;
  lenient.open(dir, 1);
  nlohmann::json typo2 = {{"step", 2}, {"pas_rate", 0.5}};
  EXPECT_NO_THROW(lenient.write(typo2));
  EXPECT_EQ(lines_of(dir + "/metrics.jsonl"), 2);
  unsetenv("DICE_STRICT_METRICS");
  fs::remove_tree(dir);
}

}  // namespace
}  // namespace dice::train
