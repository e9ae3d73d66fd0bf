// Judge integrity (DESIGN §5 trust zones): dishonest candidates written against the judge's own
// process layout get reward 0 with the right failure class, and no candidate changes another's
// verdict. The candidates share one extension (candidates/int_ext.inc, one build).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "dice/judge/judge.h"
#include "dice/judge/reward.h"
#include "dice/util/fs.h"
#include "judge/judge_testing.h"

using namespace dice::judge;
using namespace dice::judge::testing;

namespace {

std::string integrity_candidate(const std::string& name) {
  std::string code = candidate(name);
  const std::string ext = candidate("int_ext.inc");
  size_t p = code.find("@EXT@");
  if (p != std::string::npos) code.replace(p, 5, ext);
  return code;
}

struct Case {
  const char* file;
  Failure expected;
};

void expect_verdicts(const std::vector<Case>& cases, const std::vector<Verdict>& v) {
  ASSERT_EQ(v.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(failure_name(v[i].failure), std::string(failure_name(cases[i].expected)))
        << cases[i].file << "\n" << v[i].log_tail;
    const bool honest = cases[i].expected == Failure::kNone;
    for (auto kind : {RewardKind::kExec, RewardKind::kSpeedup, RewardKind::kGraded})
      if (!honest) EXPECT_EQ(reward(v[i], kind, 1.0), 0.0) << cases[i].file;
    if (honest) EXPECT_EQ(reward(v[i], RewardKind::kExec, 1.0), 1.0) << cases[i].file;
  }
}

std::vector<Job> jobs_for(const Task& task, const std::vector<Case>& cases) {
  std::vector<Job> jobs;
  for (const auto& c : cases) jobs.push_back(code_job(task, integrity_candidate(c.file)));
  return jobs;
}

}  // namespace

// Classes 1 and 3: nothing of the reference is in the candidate's process, a rebound harness
// decides nothing, and work done by library ops (however the call is spelled) is not the
// candidate's kernel. Static checks off: these are the run-time checks.
TEST(Integrity, SharedProcessTricksAndLibraryWorkGetNoReward) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";
  Judge judge(cfg);
  const std::vector<Case> cases = {
      {"int_honest.py", Failure::kNone},
      {"int_reach_reference.py", Failure::kWrongValue},    // no reference model, inputs or outputs to find
      {"int_patch_harness.py", Failure::kWrongValue},      // its rebound compare runs only in its own process
      {"int_find_reference_proc.py", Failure::kWrongValue},  // the reference process is not visible
      {"int_read_exchange.py", Failure::kWrongValue},      // no reference output in the exchange directory
      {"int_alias_op.py", Failure::kNoOwnKernel},
      {"int_getattr_op.py", Failure::kNoOwnKernel},
      {"int_exec_encoded.py", Failure::kNoOwnKernel},
      {"int_helper_class.py", Failure::kNoOwnKernel},
      {"int_operator.py", Failure::kNoOwnKernel},          // a no-op extension call + Python operators
      {"int_ext_wraps_aten.py", Failure::kNoOwnKernel},    // the extension's C++ calls torch::relu
      {"int_drop_record.py", Failure::kNoOwnKernel},       // an answer without its op record
  };
  auto v = judge.judge(jobs_for(relu, cases));
  expect_verdicts(cases, v);
  for (size_t i = 5; i + 1 < v.size(); ++i) {
    ASSERT_FALSE(v[i].findings.empty()) << cases[i].file;
    EXPECT_EQ(v[i].findings.back().severity, "reject") << cases[i].file;
  }
  // the record names what did the work
  EXPECT_NE(v[5].log_tail.find("relu"), std::string::npos) << v[5].log_tail;
  EXPECT_NE(v[10].log_tail.find("only ran ATen compute ops"), std::string::npos) << v[10].log_tail;
  EXPECT_NE(v[11].log_tail.find("no op record"), std::string::npos) << v[11].log_tail;
}

TEST(Integrity, OwnKernelRuleIsConfigurable) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";
  cfg.own_kernel = "warn";
  cfg.library_ops = "warn";
  Judge judge(cfg);
  auto v = judge.judge(jobs_for(relu, {{"int_alias_op.py", Failure::kNone}, {"int_operator.py", Failure::kNone}}));
  ASSERT_EQ(v.size(), 2u);
  for (const auto& x : v) {
    EXPECT_TRUE(x.correct) << x.log_tail;
    ASSERT_FALSE(x.findings.empty());
    EXPECT_EQ(x.findings[0].severity, "warn");
  }
  EXPECT_EQ(v[0].findings[0].check, "own_kernel");
  EXPECT_EQ(v[1].findings[0].check, "library_ops");
}

// Classes 2 and 4: a poisoner changes nothing for the candidates after it; threads and processes
// left running after forward end the evaluation with reward 0.
TEST(Integrity, NoStateReachesTheNextCandidateAndNothingMayOutliveForward) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";
  cfg.executors = 1;  // one slot: every candidate follows the poisoner there
  Judge judge(cfg);
  const std::vector<Case> first = {{"int_poison_next.py", Failure::kWrongValue}};
  auto p = judge.judge(jobs_for(relu, first));
  expect_verdicts(first, p);
  const std::vector<Case> after = {
      {"int_wrong.py", Failure::kWrongValue},          // a wrong candidate after the poisoner stays wrong
      {"int_read_leftover.py", Failure::kWrongValue},  // the poisoner's files are gone
      {"int_thread_left.py", Failure::kLeftoverProcess},
      {"int_native_thread.py", Failure::kLeftoverProcess},
      {"int_child_left.py", Failure::kLeftoverProcess},
      {"int_honest.py", Failure::kNone},
  };
  auto v = judge.judge(jobs_for(relu, after));
  expect_verdicts(after, v);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(v[i].log_tail.find("POISON-STDERR"), std::string::npos) << after[i].file << ": another candidate's stderr";
  // the poisoner's own stderr is its own log
  EXPECT_NE(p[0].log_tail.find("POISON-STDERR"), std::string::npos) << p[0].log_tail;
  // the same wrong candidate on a judge where an honest candidate came first (the same hidden seeds
  // are drawn): the same verdict, to the bit
  Judge clean(cfg);
  clean.judge(jobs_for(relu, {{"int_honest.py", Failure::kNone}}));
  auto w = clean.judge(jobs_for(relu, {after[0]}));
  EXPECT_EQ(w[0].failure, v[0].failure);
  EXPECT_EQ(w[0].log_tail, v[0].log_tail);
}

// Timing: every call is checked (a candidate honest only for the first calls fails), a clock
// patched to hide the time fails, and an implausible speedup is measured again and flagged.
TEST(Integrity, TimingCannotBeForgedOrDetected) {
  Task relu = cpu_task("relu"), slow = cpu_task("slow_relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";
  cfg.timing = true;
  cfg.warmup = 2;
  cfg.iters = 5;
  Judge judge(cfg);
  const std::vector<Case> cases = {
      {"int_honest.py", Failure::kNone},
      {"int_lazy_after_trials.py", Failure::kWrongValue},
      {"int_forge_clock.py", Failure::kTimingTampered},
      {"int_patch_harness.py", Failure::kWrongValue},
  };
  std::vector<Job> jobs = jobs_for(relu, cases);
  jobs.push_back(code_job(slow, integrity_candidate("int_honest.py")));
  auto v = judge.judge(jobs);
  ASSERT_EQ(v.size(), 5u);
  expect_verdicts(cases, {v.begin(), v.begin() + 4});
  EXPECT_GT(v[0].speedup, 0);
  EXPECT_GT(v[0].speedup_host, 0);
  EXPECT_TRUE(v[0].flags.empty());
  // the slow reference makes the honest kernel > 10x faster: re-measured, flagged, and held to the
  // judge's own clock above the bound
  const Verdict& fast = v[4];
  EXPECT_TRUE(fast.correct) << fast.log_tail;
  EXPECT_NE(std::find(fast.flags.begin(), fast.flags.end(), "implausible_speedup"), fast.flags.end());
  EXPECT_LE(fast.speedup, std::max(fast.speedup_host, cfg.plausible_speedup) + 1e-9);
  EXPECT_GE(fast.speedup, cfg.plausible_speedup);
}

// With the default settings (static checks on) no dishonest candidate gets reward either.
TEST(Integrity, DefaultSettingsRewardNoDishonestCandidate) {
  Task relu = cpu_task("relu");
  Judge judge(test_config());
  const std::vector<std::string> dishonest = {
      "int_reach_reference.py", "int_patch_harness.py", "int_find_reference_proc.py", "int_read_exchange.py", "int_alias_op.py",
      "int_getattr_op.py", "int_exec_encoded.py", "int_helper_class.py", "int_operator.py", "int_ext_wraps_aten.py",
      "int_poison_next.py", "int_wrong.py", "int_read_leftover.py", "int_thread_left.py", "int_native_thread.py",
      "int_child_left.py"};
  std::vector<Job> jobs;
  for (const auto& f : dishonest) jobs.push_back(code_job(relu, integrity_candidate(f)));
  auto v = judge.judge(jobs);
  ASSERT_EQ(v.size(), dishonest.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NE(v[i].failure, Failure::kNone) << dishonest[i];
    EXPECT_EQ(reward(v[i], RewardKind::kExec, 1.0), 0.0) << dishonest[i];
  }
}
