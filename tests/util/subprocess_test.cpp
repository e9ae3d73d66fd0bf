// Subprocess: capture, timeout + group kill, result pipe, and the namespace sandbox.
#include "dice/util/subprocess.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "dice/util/error.h"
#include "dice/util/fs.h"

using dice::proc::RunResult;
using dice::proc::SpawnOptions;

namespace {

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = {"PATH=/usr/bin:/bin"};
  return o;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST(Subprocess, CapturesOutputAndExitCode) {
  auto o = sh("echo out; echo err >&2; exit 3");
  RunResult r = dice::proc::run(o, 10);
  EXPECT_TRUE(r.status.exited);
  EXPECT_EQ(r.status.code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

// mpirun pins a rank to one core; children asked to use every CPU (the judge's builds) get them all.
TEST(Subprocess, AllCpusUndoesTheCallersPinning) {
  if (dice::proc::cpus_online() < 2 || dice::proc::cpus_allowed() < 2) GTEST_SKIP() << "needs 2 CPUs";
  cpu_set_t saved, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // like mpirun --bind-to core
  EXPECT_EQ(dice::proc::cpus_allowed(), 1);
  auto count = [](bool all) {
    auto o = sh("grep Cpus_allowed_list /proc/self/status");
    o.all_cpus = all;
    return dice::proc::run(o, 10).out;
  };
  const std::string pinned = count(false), wide = count(true);
  sched_setaffinity(0, sizeof(saved), &saved);
  EXPECT_NE(pinned, wide) << pinned;
  EXPECT_EQ(pinned.find_first_of(",-"), std::string::npos) << pinned;  // one CPU: "Cpus_allowed_list:\t3"
  EXPECT_NE(wide.find_first_of(",-"), std::string::npos) << wide;      // several: "0-1"
}

TEST(Subprocess, KeepsOnlyTheTail) {
  auto o = sh("i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done");
  o.capture_bytes = 100;
  RunResult r = dice::proc::run(o, 10);
  EXPECT_EQ(r.out.size(), 100u);
  EXPECT_NE(r.out.find("line1999\n"), std::string::npos);
}

TEST(Subprocess, StdinAndScrubbedEnvironment) {
  setenv("DICE_SECRET_TEST", "leak", 1);
  auto o = sh("cat; echo \"[$DICE_SECRET_TEST][$FOO]\"");
  o.env.push_back("FOO=bar");
  o.pipe_stdin = true;
  RunResult r = dice::proc::run(o, 10, "hello\n");
  EXPECT_EQ(r.out, "hello\n[][bar]\n");
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  std::string dir = dice::fs::make_temp_dir("dice_sp_");
  // A background grandchild that would create a file after 2 s must die with the group.
  auto o = sh("(sleep 2; touch " + dir + "/survivor) & sleep 100");
  RunResult r = dice::proc::run(o, 0.5);
  EXPECT_TRUE(r.status.timed_out);
  EXPECT_EQ(r.status.signal, SIGKILL);
  EXPECT_LT(r.wall_s, 5);
  sleep(3);
  EXPECT_FALSE(dice::fs::exists(dir + "/survivor"));
}

TEST(Subprocess, ReportsSignals) {
  RunResult r = dice::proc::run(sh("kill -SEGV $$"), 10);
  EXPECT_FALSE(r.status.exited);
  EXPECT_EQ(r.status.signal, SIGSEGV);
}

TEST(Subprocess, ResultPipeIsSeparateFromStdout) {
  auto o = sh("echo noise; echo '{\"ok\":1}' >&3; echo more noise");
  o.result_pipe = true;
  dice::proc::Subprocess p(o);
  std::string line;
  ASSERT_TRUE(p.read_result_line(line, 10));
  EXPECT_EQ(line, "{\"ok\":1}");
  auto st = p.wait(10);
  EXPECT_EQ(st.code, 0);
  EXPECT_NE(p.stdout_tail().find("noise"), std::string::npos);
}

TEST(Subprocess, DetachedChildOutlivesItsOwner) {
  std::string dir = dice::fs::make_temp_dir("dice_detach_");
  {
    dice::proc::Subprocess p(sh("sleep 0.5; echo done > " + dir + "/flag"));
    p.detach();
  }  // destroyed while the child sleeps: not killed
  EXPECT_FALSE(dice::fs::exists(dir + "/flag"));
  for (int i = 0; i < 100 && !dice::fs::exists(dir + "/flag"); ++i) usleep(50000);
  EXPECT_TRUE(dice::fs::exists(dir + "/flag"));
  {
    dice::proc::Subprocess p(sh("sleep 0.5; echo done > " + dir + "/flag2"));
  }  // owned: killed with its group
  usleep(1000000);
  EXPECT_FALSE(dice::fs::exists(dir + "/flag2"));
  dice::fs::remove_tree(dir);
}

TEST(Subprocess, BadExecutableIsAnError) {
  SpawnOptions o;
  o.argv = {"/nonexistent/dice-binary"};
  EXPECT_THROW(dice::proc::Subprocess p(o), dice::Error);
}

TEST(Subprocess, SandboxKeepsTheFileSystemReadOnlyOutsideScratch) {
  std::string scratch = dice::fs::make_temp_dir("dice_sp_scratch_");
  std::string outside = dice::fs::make_temp_dir("dice_sp_outside_");
  auto o = sh("echo x > " + scratch + "/inside; echo y > " + outside + "/escaped; rm -rf " + outside +
              "; ls /proc | grep -c '^[0-9]'");
  o.cwd = scratch;
  o.sandbox.enabled = true;
  o.sandbox.writable_paths = {scratch};
  o.sandbox.file_size_bytes = 1 << 20;
  RunResult r = dice::proc::run(o, 20);
  EXPECT_TRUE(dice::fs::exists(scratch + "/inside"));
  // Where the kernel grants a mount namespace, nothing outside scratch may change.
  if (has(r.protections, "ro_root")) {
    EXPECT_FALSE(dice::fs::exists(outside + "/escaped"));
    EXPECT_TRUE(dice::fs::exists(outside));
  } else {
    EXPECT_TRUE(has(r.protections_missing, "ro_root"));
  }
  if (has(r.protections, "pidns") && has(r.protections, "procfs")) {
    // only a handful of processes are visible inside the namespace
    EXPECT_LT(std::atoi(r.out.c_str()), 10) << r.out;
  }
  std::cerr << "applied:";
  for (auto& p : r.protections) std::cerr << ' ' << p;
  std::cerr << "  missing:";
  for (auto& p : r.protections_missing) std::cerr << ' ' << p;
  std::cerr << '\n';
}

TEST(Subprocess, SandboxHasNoNetworkAndFileSizeLimit) {
  std::string scratch = dice::fs::make_temp_dir("dice_sp_scratch_");
  auto o = sh("dd if=/dev/zero of=big bs=1M count=8 2>/dev/null; ls -l big | awk '{print $5}'");
  o.cwd = scratch;
  o.sandbox.enabled = true;
  o.sandbox.writable_paths = {scratch};
  o.sandbox.file_size_bytes = 1 << 20;
  RunResult r = dice::proc::run(o, 20);
  EXPECT_LE(std::atol(r.out.c_str()), 1 << 20);
  if (has(r.protections, "netns")) {
    auto n = sh("cat /proc/net/dev | grep -c ':'");
    n.sandbox.enabled = true;
    RunResult rn = dice::proc::run(n, 10);
    EXPECT_EQ(std::atoi(rn.out.c_str()), 1) << rn.out;  // only lo
  }
}

TEST(Subprocess, PidNamespaceKillsDescendantsThatLeftTheGroup) {
  std::string dir = dice::fs::make_temp_dir("dice_sp_");
  // setsid leaves the process group; only the pid namespace can catch it.
  auto o = sh("setsid sh -c 'sleep 2; touch " + dir + "/survivor' & sleep 100");
  o.sandbox.enabled = true;
  o.sandbox.readonly_root = false;
  RunResult r = dice::proc::run(o, 0.5);
  EXPECT_TRUE(r.status.timed_out);
  sleep(3);
  if (has(r.protections, "pidns")) EXPECT_FALSE(dice::fs::exists(dir + "/survivor"));
}

// A child that keeps uid 0 has no capability left, sees a /dev with only the basic nodes (a disk
// or loop device of the machine cannot be opened), cannot create files in /dev, and can still use
// /dev/null.
TEST(Subprocess, SandboxAsRootHasNoCapabilitiesAndAPrivateDev) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CI runs as root)";
  std::string block;  // a block device of this machine, if any
  for (const char* b : {"/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda"}) {
    struct stat st;
    if (stat(b, &st) == 0 && S_ISBLK(st.st_mode)) {
      block = b;
      break;
    }
  }
  std::string scratch = dice::fs::make_temp_dir("dice_sp_scratch_");
  auto o = sh("grep -E '^Cap(Eff|Prm|Inh|Bnd|Amb)' /proc/self/status; echo x > /dev/null && echo null_ok; "
              "(: > /dev/dice_sp_planted) 2>/dev/null && echo dev_written; "
              "(echo 1 > /proc/sys/kernel/printk_ratelimit) 2>/dev/null && echo sysctl_written; " +
              (block.empty() ? std::string() : "(head -c1 " + block + " > /dev/null) 2>/dev/null && echo block_read; "));
  o.cwd = scratch;
  o.sandbox.enabled = true;
  o.sandbox.writable_paths = {scratch};
  RunResult r = dice::proc::run(o, 20);
  ::unlink("/dev/dice_sp_planted");
  ASSERT_TRUE(has(r.protections, "nocaps") && has(r.protections, "private_dev") && has(r.protections, "proc_ro"))
      << r.err;
  for (const char* set : {"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"})
    EXPECT_NE(r.out.find(std::string(set) + ":\t0000000000000000"), std::string::npos) << set << "\n" << r.out;
  EXPECT_NE(r.out.find("null_ok"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("dev_written"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sysctl_written"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("block_read"), std::string::npos) << block << "\n" << r.out;
  dice::fs::remove_tree(scratch);
}
