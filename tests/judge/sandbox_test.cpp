// Judge sandbox plumbing: scratch dirs, scrubbed environment, uid per slot, protections.
#include "dice/judge/sandbox.h"

#include "dice/judge/doctor.h"
#include "judge_testing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dice/util/error.h"
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
                             "import getpass, os\n"
                             "print(os.environ.get('DICE_JUDGE_SECRET'), os.getuid(), os.getcwd())\n"
                             // torch (2.x: inductor's cache dir) asks for the user name; a sandbox
                             // uid has no passwd entry, so the sandbox must name it
                             "print('user', getpass.getuser())\n"
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
  EXPECT_NE(r.out.find("user dice-sandbox"), std::string::npos) << r.out << r.err;
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

namespace {

// One candidate tries to leave files everywhere outside its scratch directory, to remount / and to
// chown; the next one (another slot, another scratch) looks for them and for the first's scratch.
constexpr const char* kLeaver = R"PY(
import ctypes, json, os, sys
name, dirs = sys.argv[1], sys.argv[2:]
r = {"written": [], "remount": False, "chown": False}
open("secret", "w").write("first")
for d in dirs:
    try:
        open(os.path.join(d, name), "w").write("x")
        r["written"].append(d)
    except OSError:
        pass
try:
    v = open("/proc/sys/kernel/hostname").read()
    open("/proc/sys/kernel/hostname", "w").write(v)
    r["written"].append("/proc/sys")
except OSError:
    pass
libc = ctypes.CDLL(None, use_errno=True)
r["remount"] = libc.mount(None, b"/", None, 32 | 4096, None) == 0
r["chown"] = libc.chown(b"secret", 12345, 12345) == 0
print(json.dumps(r))
)PY";

constexpr const char* kLooker = R"PY(
import json, os, sys
name, first, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
r = {"seen": [d for d in dirs if os.path.exists(os.path.join(d, name))]}
try:
    r["secret"] = open(os.path.join(first, "secret")).read()
except OSError:
    r["secret"] = None
print(json.dumps(r))
)PY";

struct LeakResult {
  nlohmann::json first, second;
  std::vector<std::string> applied;
};

LeakResult run_leak_pair(const SandboxConfig& cfg, const std::vector<std::string>& more_dirs = {}) {
  std::string root = dice::fs::make_temp_dir("dice_sbx_leak_");
  chmod(root.c_str(), 0755);
  std::string pub = root + "/public";
  make_public_dir(pub);  // world-writable, outside every scratch directory
  int base = resolve_uid_base(cfg, DICE_PYTHON);
  std::string name = "leak_" + std::to_string(getpid());
  std::vector<std::string> dirs = {"/", "/tmp", "/var/tmp", "/dev/shm", "/dev", "/run", root, pub};
  dirs.insert(dirs.end(), more_dirs.begin(), more_dirs.end());
  LeakResult out;
  {
    Scratch a(root + "/a", base >= 0 ? base : -1);
    Scratch b(root + "/b", base >= 0 ? base + 1 : -1);
    std::vector<std::string> args = {"-c", kLeaver, name};
    args.insert(args.end(), dirs.begin(), dirs.end());
    auto o = sandboxed_python(cfg, DICE_PYTHON, args, a.path(), {}, base, false, {});
    o.pipe_stdin = o.result_pipe = false;
    auto r1 = dice::proc::run(o, 60);
    out.first = nlohmann::json::parse(r1.out, nullptr, false);
    out.applied = r1.protections;
    EXPECT_TRUE(out.first.is_object()) << r1.out << r1.err;
    std::vector<std::string> args2 = {"-c", kLooker, name, a.path()};
    args2.insert(args2.end(), dirs.begin(), dirs.end());
    auto o2 = sandboxed_python(cfg, DICE_PYTHON, args2, b.path(), {}, base >= 0 ? base + 1 : -1, false, {});
    o2.pipe_stdin = o2.result_pipe = false;
    auto r2 = dice::proc::run(o2, 60);
    out.second = nlohmann::json::parse(r2.out, nullptr, false);
    EXPECT_TRUE(out.second.is_object()) << r2.out << r2.err;
  }
  for (const auto& d : dirs) ::unlink((d + "/" + name).c_str());
  remove_tree(root);
  return out;
}

bool has_all(const std::vector<std::string>& v, std::initializer_list<const char*> want) {
  for (const char* w : want)
    if (std::find(v.begin(), v.end(), w) == v.end()) return false;
  return true;
}

}  // namespace

// Every documented combination: uid_base auto / explicit / keep (-2, root here), private /dev or
// /dev as it is. No file outside scratch, no remount, no chown, nothing seen by the next slot.
TEST(Sandbox, NoDocumentedSettingLetsACandidateLeaveFilesForTheNext) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CI runs as root): the sandbox uids and namespaces";
  struct Combo {
    int uid_base;
    bool private_dev;
  };
  for (Combo c : {Combo{-1, true}, Combo{-1, false}, Combo{61000, true}, Combo{61000, false}, Combo{-2, true}}) {
    SCOPED_TRACE(::testing::Message() << "uid_base=" << c.uid_base << " private_dev=" << c.private_dev);
    SandboxConfig cfg;
    cfg.uid_base = c.uid_base;
    cfg.private_dev = c.private_dev;
    auto r = run_leak_pair(cfg);
    ASSERT_TRUE(has_all(r.applied, {"mountns", "ro_root", "proc_ro", "nocaps"})) << ::testing::PrintToString(r.applied);
    if (c.private_dev) EXPECT_TRUE(has_all(r.applied, {"private_dev"}));
    EXPECT_EQ(r.first.value("written", nlohmann::json::array()).size(), 0u) << r.first.dump();
    EXPECT_FALSE(r.first.value("remount", true)) << r.first.dump();
    EXPECT_FALSE(r.first.value("chown", true)) << r.first.dump();
    EXPECT_EQ(r.second.value("seen", nlohmann::json::array()).size(), 0u) << r.second.dump();
    EXPECT_TRUE(r.second.value("secret", nlohmann::json()).is_null()) << r.second.dump();
  }
}

// As a cluster user (tests/judge/as_user.sh, ctest judge_unprivileged): the same protections
// through a user namespace of its own, and the user's home and working directory stay unwritten.
TEST(Unprivileged, NoFileOutsideScratchNothingSeenByTheNextSlot) {
  ASSERT_NE(geteuid(), 0u) << "run through tests/judge/as_user.sh";
  const char* home = std::getenv("HOME");
  ASSERT_TRUE(home && *home);
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  SandboxConfig cfg;
  auto r = run_leak_pair(cfg, {home, cwd});
  ASSERT_TRUE(has_all(r.applied, {"userns", "netns", "ipcns", "mountns", "pidns", "procfs", "ro_root", "proc_ro",
                                  "private_dev", "hidden", "nocaps"}))
      << ::testing::PrintToString(r.applied);
  EXPECT_EQ(r.first.value("written", nlohmann::json::array()).size(), 0u) << r.first.dump();
  EXPECT_FALSE(r.first.value("remount", true)) << r.first.dump();
  EXPECT_FALSE(r.first.value("chown", true)) << r.first.dump();
  EXPECT_EQ(r.second.value("seen", nlohmann::json::array()).size(), 0u) << r.second.dump();
  EXPECT_TRUE(r.second.value("secret", nlohmann::json()).is_null()) << r.second.dump();
}

TEST(Sandbox, SettingsThatWouldOpenTheSandboxAreRefused) {
  SandboxConfig cfg;
  cfg.readonly_root = false;
  EXPECT_THROW(resolve_uid_base(cfg, DICE_PYTHON), dice::Error);
  cfg.readonly_root = true;
  cfg.mount_namespace = false;
  EXPECT_THROW(resolve_uid_base(cfg, DICE_PYTHON), dice::Error);
  cfg.mount_namespace = true;
  cfg.private_dev = false;
  EXPECT_THROW(check_sandbox_settings(cfg, 0), dice::Error);    // uid 0 could create files in /dev
  EXPECT_NO_THROW(check_sandbox_settings(cfg, 60000));
  cfg.enabled = false;  // no sandbox at all is still a choice (trusted code)
  cfg.readonly_root = false;
  EXPECT_NO_THROW(resolve_uid_base(cfg, DICE_PYTHON));
  try {
    SandboxConfig bad;
    bad.readonly_root = false;
    check_sandbox_settings(bad, 60000);
  } catch (const dice::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sandbox.readonly_root=false"), std::string::npos) << e.what();
  }
}

TEST(Doctor, LeakProbesFindNothingWithTheDefaults) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CI runs as root)";
  auto cfg = dice::judge::testing::test_config();
  auto p = probe_sandbox(cfg, false);
  EXPECT_TRUE(p.ok) << p.detail;
  EXPECT_TRUE(p.written.empty()) << ::testing::PrintToString(p.written);
  EXPECT_TRUE(p.seen.empty()) << ::testing::PrintToString(p.seen);
  EXPECT_TRUE(p.remount_blocked);
  EXPECT_NE(p.mode.find("read-only"), std::string::npos) << p.mode;
}
