// Judge sandbox plumbing: scratch dirs, scrubbed environment, uid per slot, protections.
#include "dice/judge/sandbox.h"

#include "dice/judge/doctor.h"
#include "judge_testing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dice/util/fs.h"
#include "dice/util/subprocess.h"

using namespace dice::judge;

TEST(Sandbox, ScratchIsOwnedByTheSlotUidAndRemoved) {
  std::string root = dice::fs::make_temp_dir("dice_sbx_");
  int uid = geteuid() == 0 ? 60123 : -1;
  std::string path;
  {
    Scratch s(root + "/slot", uid);
    path = s.path();
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    if (uid >= 0) EXPECT_EQ(static_cast<int>(st.st_uid), uid);
    dice::fs::write_file(path + "/f", "x");
    s.clear();
    EXPECT_FALSE(dice::fs::exists(path + "/f"));
    EXPECT_TRUE(dice::fs::exists(path));
  }
  EXPECT_FALSE(dice::fs::exists(path));
  remove_tree(root);
}

TEST(Sandbox, PythonSeesScrubbedEnvironmentOtherUidAndReadOnlyRoot) {
  SandboxConfig cfg;
  setenv("DICE_JUDGE_SECRET", "leak", 1);
  std::string root = dice::fs::make_temp_dir("dice_sbx_");
  chmod(root.c_str(), 0755);
  int base = resolve_uid_base(cfg, DICE_PYTHON);
  int uid = base >= 0 ? base + 7 : -1;
  Scratch s(root + "/slot", uid);
  auto o = sandboxed_python(cfg, DICE_PYTHON,
                            {"-c",
                             "import os\n"
                             "print(os.environ.get('DICE_JUDGE_SECRET'), os.getuid(), os.getcwd())\n"
                             "open('ok', 'w').write('1')\n"
                             "try:\n  open('" + root + "/escape', 'w')\n  print('escaped')\n"
                             "except OSError as e:\n  print('blocked', e.errno)\n"},
                            s.path(), {}, uid, false, {});
  o.pipe_stdin = false;
  o.result_pipe = false;
  auto r = dice::proc::run(o, 60);
  ASSERT_TRUE(r.status.exited) << r.err;
  EXPECT_NE(r.out.find("None"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(s.path()), std::string::npos) << r.out;
  EXPECT_TRUE(dice::fs::exists(s.path() + "/ok"));
  if (uid >= 0) EXPECT_NE(r.out.find(" " + std::to_string(uid) + " "), std::string::npos) << r.out;
  if (r.protections_missing.empty()) {
    EXPECT_NE(r.out.find("blocked"), std::string::npos) << r.out;
    EXPECT_FALSE(dice::fs::exists(root + "/escape"));
  }
  remove_tree(root);
}

TEST(Sandbox, UidBaseChoices) {
  SandboxConfig cfg;
  cfg.uid_base = -2;
  EXPECT_EQ(resolve_uid_base(cfg, DICE_PYTHON), -1);
  cfg.uid_base = 61000;
  EXPECT_EQ(resolve_uid_base(cfg, DICE_PYTHON), 61000);
  cfg.enabled = false;
  EXPECT_EQ(resolve_uid_base(cfg, DICE_PYTHON), -1);
}

TEST(Doctor, ConfiguredSandboxRunsTorch) {
  auto cfg = dice::judge::testing::test_config();
  auto d = diagnose_sandbox(cfg, false, false);
  ASSERT_EQ(d.probes.size(), 1u);  // it passed, so no variants were tried
  EXPECT_TRUE(d.probes[0].ok) << d.probes[0].detail;
  EXPECT_NE(d.probes[0].detail.find("torch"), std::string::npos);
  if (d.probes[0].missing.empty()) EXPECT_TRUE(d.probes[0].write_outside_blocked);
}

TEST(Doctor, FindsTheProtectionThatBreaksThePython) {
  auto cfg = dice::judge::testing::test_config();
  cfg.sandbox.open_files = 3;  // stdin/stdout/stderr only: the interpreter cannot start
  auto d = diagnose_sandbox(cfg, false, false);
  ASSERT_FALSE(d.probes.empty());
  EXPECT_FALSE(d.probes[0].ok);
  EXPECT_TRUE(d.fixed);
  ASSERT_EQ(d.fix.size(), 1u);
  EXPECT_EQ(d.fix[0], "sandbox.open_files=0");
  EXPECT_TRUE(d.probes.back().ok);  // enabled=false, the last single variant
}

TEST(Doctor, ReportsNoFixWhenThePythonIsBroken) {
  auto cfg = dice::judge::testing::test_config();
  cfg.python = "/bin/false";
  auto d = diagnose_sandbox(cfg, false, false);
  EXPECT_FALSE(d.fixed);
  EXPECT_TRUE(d.fix.empty());
  for (const auto& p : d.probes) EXPECT_FALSE(p.ok) << p.variant;
}
