#pragma once
// VerdictMemo: verdicts already given, so that the same code for the same task, under the same judge
// settings, is not built and run again (judge.reuse_verdicts). An RL run samples one answer many
// times over its steps and its evaluations (the CPU quickstart: ~20 distinct candidates of 48 a
// step, ~8 of them not seen at an earlier step); Judge::judge already judges a batch's copies once.
//
// Kept in this process, and, with a directory, also as one file per key under it (the judge's
// <cache_root>/verdicts): files this user wrote and no one else may change, as the build cache's
// entries. Only verdicts the same code gets again are kept: correct, and the failures that the code
// itself decides (compile error, load / runtime error, wrong shape or values, inputs changed,
// nondeterministic, no own kernel, a process left behind, tampered timing) -- never a timeout, a
// crash, a resource limit, a sandbox violation or a judge error, which a machine's state can cause,
// nor one whose log shows a machine limit (shows_machine_limit: a killed compiler, memory, disk).
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "dice/judge/task.h"
#include "dice/judge/verdict.h"

namespace dice::judge {

class VerdictMemo {
 public:
  // identity: everything besides the task and the code that decides a verdict (the judge's settings,
  // toolchain, harness and program); dir: "" = this process only.
  VerdictMemo(std::string identity, std::string dir);
  std::string key(const Task& task, const std::string& code) const;
  // The verdict kept under key (task_id checked), if any.
  std::optional<Verdict> find(const std::string& key, const std::string& task_id);
  // Keeps v under key when the same code would get it again (see above); a reused verdict is not kept again.
  void put(const std::string& key, const Verdict& v);
  static bool keepable(const Verdict& v);
  const std::string& dir() const { return dir_; }

 private:
  std::string identity_, dir_;
  std::mutex mu_;
  std::unordered_map<std::string, Verdict> kept_;
};

}  // namespace dice::judge
