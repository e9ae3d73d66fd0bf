// Metrics on a hand-made verdict set whose values are worked out by hand below.
#include "dice/judge/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::judge {
namespace {

Task task(const std::string& id, int level) {
  Task t;
  t.id = id;
  t.level = level;
  t.reference = "r";
  return t;
}

Verdict verdict(const std::string& id, bool compiled, bool correct, double speedup, Failure f = Failure::kNone,
                std::vector<Finding> findings = {}) {
  Verdict v;
  v.task_id = id;
  v.extracted = f != Failure::kNoCode;
  v.compiled = compiled;
  v.correct = correct;
  v.speedup = speedup;
  v.failure = f;
  v.findings = std::move(findings);
  return v;
}

// Tasks A, B (level 1), C, D (level 2). n = 3 samples per task (A and C have 3).
//   A: correct 2.0x, correct 0.5x, compiled but wrong value (torch_op_in_forward reject)
//   B: correct 4.0x, compile error, (missing)
//   C: correct untimed, no code, static reject (stream reject + caching warn)
//   D: (3 missing)
// plus one verdict for a task outside the list.
struct Fixture {
  std::vector<Task> tasks = {task("A", 1), task("B", 1), task("C", 2), task("D", 2)};
  std::vector<Verdict> verdicts = {
      verdict("A", true, true, 2.0),
      verdict("A", true, true, 0.5),
      verdict("A", true, false, -1, Failure::kWrongValue, {{"torch_op_in_forward", "reject", "line 3"}}),
      verdict("B", true, true, 4.0),
      verdict("B", false, false, -1, Failure::kCompileError),
      verdict("C", true, true, -1),
      verdict("C", false, false, -1, Failure::kNoCode),
      verdict("C", false, false, -1, Failure::kStaticReject, {{"stream", "reject", "line 9"}, {"caching", "warn", "line 2"}}),
      verdict("zzz", true, true, 9.0),
  };
};

TEST(Metrics, OverallByHand) {
  Fixture fx;
  MetricsOptions opts;
  opts.fast_p = {0.0, 0.4, 1.0, 2.0};
  opts.pass_k = {1, 2, 3, 5};
  const Metrics m = compute_metrics(fx.verdicts, fx.tasks, opts);
  const GroupMetrics& g = m.overall;
  EXPECT_EQ(g.tasks, 4);
  EXPECT_EQ(g.samples_per_task, 3);
  EXPECT_EQ(g.expected, 12);
  EXPECT_EQ(g.judged, 8);
  EXPECT_EQ(g.missing, 4);
  EXPECT_EQ(m.unknown_task_verdicts, 1);
  EXPECT_DOUBLE_EQ(g.compile_rate, 5.0 / 12);  // a1 a2 a3 b1 c1
  EXPECT_DOUBLE_EQ(g.exec, 4.0 / 12);           // a1 a2 b1 c1
  EXPECT_DOUBLE_EQ(g.fast_p.at(0.0), g.exec);   // fast_0 == Exec, the untimed c1 included
  EXPECT_DOUBLE_EQ(g.fast_p.at(0.4), 3.0 / 12); // a1 a2 b1
  EXPECT_DOUBLE_EQ(g.fast_p.at(1.0), 2.0 / 12); // a1 b1
  EXPECT_DOUBLE_EQ(g.fast_p.at(2.0), 1.0 / 12); // b1 only: 2.0 is not > 2
  EXPECT_EQ(g.timed_correct, 3);
  EXPECT_NEAR(g.geomean_speedup, std::cbrt(2.0 * 0.5 * 4.0), 1e-12);
  // pass@k per task (n = 3): A c=2, B c=1, C c=1, D c=0
  //   k=1: c/n -> (2/3 + 1/3 + 1/3 + 0) / 4 = 1/3
  //   k=2: A 1 - C(1,2)/C(3,2) = 1; B, C 1 - C(2,2)/C(3,2) = 2/3; D 0 -> 7/12
  //   k=3: A, B, C 1; D 0 -> 3/4; k=5 > n is not reported
  EXPECT_NEAR(g.pass_at_k.at(1), 1.0 / 3, 1e-12);
  EXPECT_NEAR(g.pass_at_k.at(2), 7.0 / 12, 1e-12);
  EXPECT_NEAR(g.pass_at_k.at(3), 0.75, 1e-12);
  EXPECT_EQ(g.pass_at_k.count(5), 0u);
  EXPECT_EQ(g.failures.at("missing"), 4);
  EXPECT_EQ(g.failures.at("wrong_value"), 1);
  EXPECT_EQ(g.failures.at("compile_error"), 1);
  EXPECT_EQ(g.failures.at("no_code"), 1);
  EXPECT_EQ(g.failures.at("static_reject"), 1);
  EXPECT_EQ(g.failures.size(), 5u);
  EXPECT_EQ(g.findings.at("torch_op_in_forward").at("reject"), 1);
  EXPECT_EQ(g.findings.at("stream").at("reject"), 1);
  EXPECT_EQ(g.findings.at("caching").at("warn"), 1);
}

TEST(Metrics, PerLevelByHand) {
  Fixture fx;
  MetricsOptions opts;
  opts.pass_k = {1, 2};
  const Metrics m = compute_metrics(fx.verdicts, fx.tasks, opts);
  ASSERT_EQ(m.by_level.size(), 2u);
  const GroupMetrics& l1 = m.by_level.at(1);
  EXPECT_EQ(l1.expected, 6);
  EXPECT_EQ(l1.missing, 1);
  EXPECT_DOUBLE_EQ(l1.compile_rate, 4.0 / 6);
  EXPECT_DOUBLE_EQ(l1.exec, 3.0 / 6);
  EXPECT_DOUBLE_EQ(l1.fast_p.at(1.0), 2.0 / 6);
  EXPECT_DOUBLE_EQ(l1.fast_p.at(2.0), 1.0 / 6);
  EXPECT_NEAR(l1.geomean_speedup, std::cbrt(2.0 * 0.5 * 4.0), 1e-12);  // every timed sample is level 1
  EXPECT_NEAR(l1.pass_at_k.at(1), 0.5, 1e-12);
  EXPECT_NEAR(l1.pass_at_k.at(2), (1.0 + 2.0 / 3) / 2, 1e-12);
  const GroupMetrics& l2 = m.by_level.at(2);
  EXPECT_EQ(l2.expected, 6);
  EXPECT_EQ(l2.missing, 3);
  EXPECT_DOUBLE_EQ(l2.exec, 1.0 / 6);
  EXPECT_DOUBLE_EQ(l2.fast_p.at(0.0), 1.0 / 6);
  EXPECT_DOUBLE_EQ(l2.fast_p.at(1.0), 0.0);
  EXPECT_EQ(l2.timed_correct, 0);  // c1 was not timed: no geomean
  EXPECT_NEAR(l2.pass_at_k.at(2), (2.0 / 3 + 0) / 2, 1e-12);
}

TEST(Metrics, JsonOutput) {
  Fixture fx;
  const Metrics m = compute_metrics(fx.verdicts, fx.tasks);
  const auto j = nlohmann::json::parse(metrics_to_json(m));
  EXPECT_EQ(j["overall"]["tasks"], 4);
  EXPECT_DOUBLE_EQ(j["overall"]["exec"].get<double>(), 4.0 / 12);
  EXPECT_DOUBLE_EQ(j["overall"]["fast_p"]["1"].get<double>(), 2.0 / 12);
  EXPECT_TRUE(j["overall"]["fast_p"].contains("0"));
  EXPECT_TRUE(j["overall"]["fast_p"].contains("2"));
  EXPECT_NEAR(j["overall"]["pass_at_k"]["1"].get<double>(), 1.0 / 3, 1e-12);
  EXPECT_FALSE(j["overall"]["pass_at_k"].contains("5"));  // default k list, n = 3
  EXPECT_TRUE(j["levels"]["2"]["geomean_speedup"].is_null());
  EXPECT_NEAR(j["levels"]["1"]["geomean_speedup"].get<double>(), std::cbrt(4.0), 1e-12);
  EXPECT_EQ(j["overall"]["failures"]["missing"], 4);
  EXPECT_EQ(j["overall"]["findings"]["stream"]["reject"], 1);
  EXPECT_EQ(j["unknown_task_verdicts"], 1);
  const std::string s = metrics_summary(m);
  EXPECT_NE(s.find("exec 33.3%"), std::string::npos) << s;
  EXPECT_NE(s.find("level 2"), std::string::npos) << s;
}

TEST(Metrics, NoVerdictsMeansEverythingMissing) {
  Fixture fx;
  const Metrics m = compute_metrics({}, fx.tasks);
  EXPECT_EQ(m.overall.samples_per_task, 1);
  EXPECT_EQ(m.overall.missing, 4);
  EXPECT_DOUBLE_EQ(m.overall.exec, 0.0);
  EXPECT_DOUBLE_EQ(m.overall.pass_at_k.at(1), 0.0);
  const Metrics empty = compute_metrics({}, {});
  EXPECT_EQ(empty.overall.expected, 0);
  EXPECT_DOUBLE_EQ(empty.overall.exec, 0.0);
}

TEST(Metrics, PassAtKEstimator) {
  EXPECT_DOUBLE_EQ(pass_at_k(10, 0, 1), 0.0);
  EXPECT_NEAR(pass_at_k(10, 3, 1), 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(pass_at_k(10, 8, 5), 1.0);  // fewer than k failures: always passes
  // 1 - C(199, 100) / C(200, 100) = 1 - 100 / 200
  EXPECT_NEAR(pass_at_k(200, 1, 100), 0.5, 1e-12);
  // large n stays finite and agrees with the log-gamma form
  const int n = 5000, c = 7, k = 100;
  const double lg = std::lgamma(n - c + 1) - std::lgamma(n - c - k + 1) - std::lgamma(n + 1) + std::lgamma(n - k + 1);
  EXPECT_NEAR(pass_at_k(n, c, k), 1.0 - std::exp(lg), 1e-9);  // lgamma of ~5000 carries ~1e-11 error
  EXPECT_THROW(pass_at_k(3, 1, 4), Error);
  EXPECT_THROW(pass_at_k(3, 4, 1), Error);
  EXPECT_THROW(pass_at_k(0, 0, 1), Error);
}

TEST(Metrics, LoadVerdictsFromJsonl) {
  const std::string dir = fs::make_temp_dir("dice_metrics_test");
  const std::string path = dir + "/v.jsonl";
  fs::write_file(path,
                 "{\"task_id\":\"A\",\"compiled\":true,\"correct\":true,\"speedup\":1.5,\"reward\":1}\n\n"
                 "{\"task_id\":\"B\",\"sample_id\":2,\"verdict\":{\"compiled\":false,\"failure\":\"compile_error\"}}\n");
  const auto vs = load_verdicts(path);
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_EQ(vs[0].task_id, "A");
  EXPECT_TRUE(vs[0].correct);
  EXPECT_DOUBLE_EQ(vs[0].speedup, 1.5);
  EXPECT_EQ(vs[1].task_id, "B");
  EXPECT_EQ(vs[1].failure, Failure::kCompileError);
  fs::write_file(path, "{\"task_id\":\"A\"}\n{\"task_id\":\"B\",\"failure\":\"exploded\"}\n");
  try {
    load_verdicts(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(Metrics, DuplicateTaskIdsAreRejected) {
  EXPECT_THROW(compute_metrics({}, {task("A", 1), task("A", 2)}), Error);
}

}  // namespace
}  // namespace dice::judge
