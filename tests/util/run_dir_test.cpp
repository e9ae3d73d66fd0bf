// Run-directory contract: lock, fingerprint comparison, resume plan, atomic writes.
#include "dice/util/run_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice {
namespace {

std::string temp_dir() { return fs::make_temp_dir("dice_run_dir_test."); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunDir, SecondLockIsRefusedNamingTheHolderAndReleasedOnDestruction) {
  auto dir = temp_dir();
  {
    auto first = run_dir::lock_dir(dir, "the folder X");
    EXPECT_TRUE(first.held());
    // Another open file description in this process conflicts like another process would.
    std::string err = error_of([&] { run_dir::lock_dir(dir, "the folder X"); });
    EXPECT_NE(err.find("the folder X is in use by another dice run (host "), std::string::npos) << err;
    EXPECT_NE(err.find(str("pid ", ::getpid(), ")")), std::string::npos) << err;
  }
  EXPECT_TRUE(run_dir::lock_dir(dir, "the folder X").held());
  fs::remove_tree(dir);
}

TEST(RunDir, LockOfADeadProcessIsTakenOver) {
  auto dir = temp_dir();
  pid_t child = fork();
  if (child == 0) {
    auto l = run_dir::lock_dir(dir, "x");
    _exit(0);  // dies holding it: the kernel drops the flock, the file still names the child
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_NE(fs::read_file(dir + "/" + run_dir::kLockFile).find(str("pid ", child)), std::string::npos);
  auto l = run_dir::lock_dir(dir, "x");
  EXPECT_TRUE(l.held());
  EXPECT_NE(fs::read_file(dir + "/" + run_dir::kLockFile).find(str("pid ", ::getpid())), std::string::npos);
  fs::remove_tree(dir);
}

TEST(RunDir, DifferencesNameEachKeyWithBothValuesAndIgnoreAboutKeys) {
  run_dir::Fingerprint then = {{"a", "1"}, {"b", "x"}, {"about.c", "/old"}, {"c", "d1"}};
  run_dir::Fingerprint now = {{"a", "1"}, {"b", "y"}, {"about.c", "/new"}, {"c", "d1"}, {"e", "2"}};
  EXPECT_EQ(run_dir::describe_differences(then, now), "b ('x' then, 'y' now), e (unset then, '2' now)");
  now["c"] = "d2";
  EXPECT_NE(run_dir::describe_differences(then, now).find("c ('/old' 'd1"), std::string::npos);
  EXPECT_EQ(run_dir::describe_differences(then, then), "");
}

TEST(RunDir, PlanResumeRefusesAnotherFingerprintUnlessAsked) {
  auto dir = temp_dir();
  run_dir::write_fingerprint(dir, {{"k", "1"}});
  using run_dir::OnMismatch;
  using run_dir::Plan;
  EXPECT_EQ(run_dir::plan_resume(dir, {{"k", "1"}}, true, OnMismatch::kRefuse, "f"), Plan::kResume);
  EXPECT_EQ(run_dir::plan_resume(dir, {{"k", "2"}}, false, OnMismatch::kRefuse, "f"), Plan::kNew);
  std::string err = error_of([&] { run_dir::plan_resume(dir, {{"k", "2"}}, true, OnMismatch::kRefuse, "f"); });
  EXPECT_NE(err.find("k ('1' then, '2' now)"), std::string::npos) << err;
  EXPECT_NE(err.find("--fresh"), std::string::npos);
  EXPECT_EQ(run_dir::plan_resume(dir, {{"k", "2"}}, true, OnMismatch::kContinue, "f"), Plan::kResume);
  EXPECT_EQ(run_dir::plan_resume(dir, {{"k", "2"}}, true, OnMismatch::kFresh, "f"), Plan::kFresh);
  fs::write_file(dir + "/result", "r");
  run_dir::clear_results(dir);
  EXPECT_FALSE(fs::exists(dir + "/result"));
  EXPECT_FALSE(fs::exists(dir + "/" + run_dir::kFingerprintFile));
  fs::remove_tree(dir);
}

TEST(RunDir, WritableChecks) {
  auto dir = temp_dir();
  fs::write_file(dir + "/file", "x");
  EXPECT_NE(error_of([&] { run_dir::ensure_writable_dir(dir + "/file", "--out"); }).find("is a file"), std::string::npos);
  EXPECT_NE(error_of([&] { run_dir::ensure_writable_file(dir + "/missing/v.jsonl", "--out"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_dir::ensure_writable_file(dir, "--out"); }).find("is a folder"), std::string::npos);
  EXPECT_EQ(error_of([&] { run_dir::ensure_writable_dir(dir + "/new/sub", "--out"); }), "");
  EXPECT_TRUE(fs::exists(dir + "/new/sub"));
  fs::remove_tree(dir);
}

TEST(Fs, FailedAtomicWriteKeepsTheOldFile) {
  auto dir = temp_dir();
  fs::write_file_atomic(dir + "/f", "old");
  ::mkdir((dir + "/f.tmp." + std::to_string(::getpid())).c_str(), 0700);  // the temp name cannot be a file
  EXPECT_NE(error_of([&] { fs::write_file_atomic(dir + "/f", "new"); }), "");
  EXPECT_EQ(fs::read_file(dir + "/f"), "old");
  ::rmdir((dir + "/f.tmp." + std::to_string(::getpid())).c_str());
  fs::write_file_atomic(dir + "/f", "new");
  EXPECT_EQ(fs::read_file(dir + "/f"), "new");
  fs::remove_tree(dir);
}

TEST(Fs, ReplaceDirSwapsAWholeFolderIn) {
  auto dir = temp_dir();
  ::mkdir((dir + "/out").c_str(), 0755);
  fs::write_file(dir + "/out/a", "old");
  ::mkdir((dir + "/staged").c_str(), 0755);
  fs::write_file(dir + "/staged/a", "new");
  fs::replace_dir(dir + "/staged", dir + "/out");
  EXPECT_EQ(fs::read_file(dir + "/out/a"), "new");
  EXPECT_FALSE(fs::exists(dir + "/staged"));
  fs::remove_tree(dir);
}

}  // namespace
}  // namespace dice
