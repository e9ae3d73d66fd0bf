// The judge as a cluster user (issue 23). These run only as an unprivileged user, through
// tests/judge/as_user.sh (ctest: judge_unprivileged); the root runs exclude them.
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "dice/judge/judge.h"
#include "dice/judge/sandbox.h"
#include "dice/util/fs.h"
#include "judge/judge_testing.h"

using namespace dice::judge;
using namespace dice::judge::testing;

namespace {

// Processes (any uid we can see) whose command line contains `mark`.
int processes_with(const std::string& mark) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::string cmd;
    try {
      cmd = dice::fs::read_file(e.path().string() + "/cmdline");
    } catch (const std::exception&) {
      continue;  // gone
    }
    if (cmd.find(mark) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace

TEST(Unprivileged, RunsAsANormalUserWithTheUserNamespace) {
  ASSERT_NE(geteuid(), 0u) << "run through tests/judge/as_user.sh";
  SandboxConfig cfg;
  EXPECT_TRUE(uses_user_namespace(cfg));
  EXPECT_EQ(user_namespace_problem(cfg), "");
  EXPECT_NE(describe_sandbox(cfg, -1).find("user namespace"), std::string::npos) << describe_sandbox(cfg, -1);
}

// A correct candidate that tries the user's own files and leaves a daemon: nothing it wrote
// survives, the files it tried to change are unchanged, and no process of it outlives the judge.
TEST(Unprivileged, CandidateCannotTouchTheUsersFilesNorOutliveItsEvaluation) {
  ASSERT_NE(geteuid(), 0u) << "run through tests/judge/as_user.sh";
  const passwd* pw = getpwuid(getuid());
  ASSERT_NE(pw, nullptr);
  const std::string home = pw->pw_dir;
  // a run directory of the user's own, in the home directory
  std::string tmpl = home + "/dice_unpriv_run_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "cannot create a directory in " << home;
  const std::string run = tmpl;
  dice::fs::write_file(run + "/keep.txt", "canary");
  const std::string mark = "dice-unpriv-mark-" + std::to_string(getpid());
  std::string code = candidate("unpriv_escape.py");
  code = replace_all(replace_all(replace_all(code, "@CANARY@", run), "@HOME@", home), "@MARK@", mark);

  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.static_check = "off";  // the runtime sandbox, not the static checks
  Judge judge(cfg);
  EXPECT_TRUE(judge.protections_missing().empty()) << ::testing::PrintToString(judge.protections_missing());
  auto v = judge.judge({code_job(relu, code), code_job(relu, candidate("relu_honest.py"))});
  ASSERT_EQ(v.size(), 2u);
  // its outputs are right: whatever else it is, it must not be a judge error
  EXPECT_TRUE(v[0].failure == Failure::kNone || v[0].failure == Failure::kLeftoverProcess)
      << failure_name(v[0].failure) << "\n" << v[0].log_tail;
  EXPECT_TRUE(v[1].correct) << v[1].log_tail;
  EXPECT_EQ(dice::fs::read_file(run + "/keep.txt"), "canary");
  EXPECT_FALSE(dice::fs::exists(run + "/planted.txt"));
  EXPECT_FALSE(dice::fs::exists(home + "/planted_" + mark + ".txt"));
  int left = -1;
  for (int i = 0; i < 50 && (left = processes_with(mark)) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(left, 0) << "the candidate's daemon outlived its evaluation";
  dice::fs::remove_tree(run);
  ::unlink((home + "/planted_" + mark + ".txt").c_str());
}
