// Mutation suite: each broken or cheating candidate gets the expected verdict (CPU, C++ load_inline).
// All mutants share one extension build (one load_inline with several functions).
#include <gtest/gtest.h>

#include <map>

#include "dice/judge/judge.h"
#include "dice/judge/reward.h"
#include "judge/judge_testing.h"

using namespace dice::judge;
using namespace dice::judge::testing;

TEST(Mutation, EachMutantGetsTheExpectedVerdict) {
  Task relu = cpu_task("relu"), rowsum = cpu_task("rowsum");
  struct Case {
    const char* file;
    const Task* task;
    Failure expected;
  };
  const std::vector<Case> cases = {
      {"mut_honest_shared.py", &relu, Failure::kNone},
      {"mut_wrong_index.py", &relu, Failure::kWrongValue},
      {"mut_missing_boundary.py", &relu, Failure::kWrongValue},
      {"mut_wrong_reduction.py", &rowsum, Failure::kWrongValue},
      {"mut_returns_input.py", &relu, Failure::kWrongValue},
      {"mut_returns_zeros.py", &relu, Failure::kWrongValue},
      {"mut_returns_empty.py", &relu, Failure::kWrongValue},
      {"mut_torch_op.py", &relu, Failure::kStaticReject},
      {"mut_try_except.py", &relu, Failure::kStaticReject},
      {"mut_side_stream.py", &relu, Failure::kStaticReject},
      {"mut_cached_output.py", &relu, Failure::kWrongValue},
      {"mut_inplace_input.py", &relu, Failure::kInputMutated},
  };
  JudgeConfig cfg = test_config();
  cfg.timing = true;  // the cached-output mutant must also fail the re-check after timing
  cfg.iters = 3;
  Judge judge(cfg);
  std::vector<Job> jobs;
  for (const auto& c : cases) jobs.push_back(code_job(*c.task, candidate(c.file)));
  auto v = judge.judge(jobs);
  ASSERT_EQ(v.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(v[i].failure, cases[i].expected)
        << cases[i].file << ": got " << failure_name(v[i].failure) << "\n" << v[i].log_tail;
    double r = reward(v[i], RewardKind::kExec, 1.0);
    EXPECT_EQ(r, cases[i].expected == Failure::kNone ? 1.0 : 0.0) << cases[i].file;
    if (cases[i].expected == Failure::kStaticReject) {
      EXPECT_FALSE(v[i].findings.empty()) << cases[i].file;
      EXPECT_FALSE(v[i].compiled);
    }
  }
}

TEST(Mutation, WarnModeLetsStaticFindingsThroughToTheRuntimeChecks) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "warn";
  Judge judge(cfg);
  // The try/except mutant calls a wrong kernel, which succeeds (no exception): the runtime check
  // must still catch the wrong values.
  auto v = judge.judge({code_job(relu, candidate("mut_try_except.py"))});
  EXPECT_EQ(v[0].failure, Failure::kWrongValue) << failure_name(v[0].failure) << v[0].log_tail;
  ASSERT_FALSE(v[0].findings.empty());
  EXPECT_EQ(v[0].findings[0].severity, "warn");
}
