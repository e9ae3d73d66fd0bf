// Hostile suite: each candidate ends with reward 0 and the right failure class, nothing outside
// its scratch dir changes, and the judge goes on serving the next candidate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "dice/judge/judge.h"
#include "dice/judge/reward.h"
#include "dice/util/fs.h"
#include "judge/judge_testing.h"

using namespace dice::judge;
using namespace dice::judge::testing;

namespace {
std::string with_canary(const std::string& code, const std::string& canary) {
  return replace_all(code, "@CANARY@", canary);
}
}  // namespace

TEST(Hostile, SandboxContainsEveryCandidateAndTheJudgeKeepsServing) {
  Task relu = cpu_task("relu");
  std::string canary = dice::fs::make_temp_dir("dice_canary_");
  dice::fs::write_file(canary + "/keep.txt", "canary");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";  // exercise the runtime sandbox, not the static checks
  cfg.exec_timeout_s = 5;
  cfg.sandbox.memory_mb = 4096;
  Judge judge(cfg);
  const bool contained = judge.protections_missing().empty();

  struct Case {
    const char* file;
    std::set<Failure> expected;
  };
  const std::vector<Case> cases = {
      {"hostile_infinite_loop.py", {Failure::kTimeout}},
      {"hostile_fork_bomb.py", {Failure::kResourceLimit, Failure::kTimeout}},
      {"hostile_rm_rf.py", {Failure::kSandboxViolation}},
      {"hostile_write_outside.py", {Failure::kSandboxViolation}},
      {"hostile_socket.py", {Failure::kSandboxViolation}},
      {"hostile_big_file.py", {Failure::kResourceLimit}},
      {"hostile_segfault.py", {Failure::kCrash}},
      {"hostile_os_exit.py", {Failure::kCrash}},
      {"hostile_huge_alloc.py", {Failure::kResourceLimit}},
      {"hostile_import_exit.py", {Failure::kCrash}},
      // a forged answer on the candidate's own channel decides nothing: the output file is checked
      {"hostile_forge_result.py", {Failure::kRuntimeError, Failure::kWrongValue}},
      {"relu_honest.py", {Failure::kNone}},  // the next, honest candidate is still served
  };
  std::vector<Job> jobs;
  for (const auto& c : cases) jobs.push_back(code_job(relu, with_canary(candidate(c.file), canary)));
  auto v = judge.judge(jobs);
  ASSERT_EQ(v.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    bool honest = cases[i].expected.count(Failure::kNone) > 0;
    if (contained || honest) {
      EXPECT_TRUE(cases[i].expected.count(v[i].failure))
          << cases[i].file << ": got " << failure_name(v[i].failure) << "\n" << v[i].log_tail;
    }
    EXPECT_EQ(reward(v[i], RewardKind::kExec, 1.0), honest ? 1.0 : 0.0) << cases[i].file;
  }
  if (contained) {
    EXPECT_TRUE(dice::fs::exists(canary + "/keep.txt"));
    EXPECT_FALSE(dice::fs::exists(canary + "/planted.txt"));
  }
  EXPECT_GE(judge.executor_restarts(), 3);  // crashes and timeouts replaced the executor
  // and a later batch on the same judge still works
  auto again = judge.judge({code_job(relu, candidate("relu_honest.py"))});
  EXPECT_TRUE(again[0].correct) << again[0].log_tail;
}

// The build cache is written only by the judge: a candidate cannot replace the binary that later
// candidates with the same sources load, plant entries, or run programs through compiler flags.
TEST(Hostile, CandidatesCannotPoisonTheBuildCacheOrRunProgramsThroughFlags) {
  Task relu = cpu_task("relu");
  std::string canary = dice::fs::make_temp_dir("dice_canary_");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";
  Judge judge(cfg);
  const bool contained = judge.protections_missing().empty();

  std::string honest = candidate("relu_honest.py");
  auto with_flags = [&](const std::string& flags) {
    std::string c = honest;
    const std::string call = "functions=[\"relu_forward\"],";
    c.insert(c.find(call) + call.size(), " extra_cflags=" + flags + ",");
    return c;
  };
  const std::string inject = with_flags("[\"-O2;touch " + canary + "/injected.txt\"]");
  const std::string wrapper = with_flags("[\"-wrapper\", \"/bin/sh,-c,touch " + canary + "/wrapped.txt\"]");
  const std::string response_file = with_flags("[\"@main.cpp\"]");
  auto v = judge.judge({code_job(relu, candidate("hostile_poison_cache.py")), code_job(relu, inject),
                        code_job(relu, wrapper), code_job(relu, response_file)});
  ASSERT_EQ(v.size(), 4u);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(v[i].failure, Failure::kCompileError) << i << ": " << v[i].log_tail;
    EXPECT_NE(v[i].log_tail.find("not allowed"), std::string::npos) << v[i].log_tail;
  }
  EXPECT_FALSE(dice::fs::exists(canary + "/injected.txt"));
  EXPECT_FALSE(dice::fs::exists(canary + "/wrapped.txt"));
  // the honest candidate with the same sources loads the judge's build, untouched
  auto after = judge.judge({code_job(relu, honest)});
  EXPECT_TRUE(after[0].cache_hit);
  if (contained) {  // (without uid separation or a read-only view, a candidate runs as the cache's owner)
    EXPECT_TRUE(after[0].correct) << after[0].log_tail;
    EXPECT_FALSE(dice::fs::exists(cfg.cache_root + "/planted"));
    EXPECT_FALSE(dice::fs::exists(cfg.cache_root + "/planted.txt"));
  }
  remove_tree(canary);
}
