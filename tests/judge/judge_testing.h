#pragma once
// Shared helpers of the judge tests: CPU tasks and candidates under tests/judge, and a judge
// config whose build cache lives in the build tree (so builds are reused across tests and runs).
#include <string>

#include "dice/judge/judge.h"
#include "dice/judge/task.h"
#include "dice/util/fs.h"

namespace dice::judge::testing {

inline std::string here() { return std::string(DICE_SOURCE_DIR) + "/tests/judge"; }
inline std::string candidate(const std::string& name) { return fs::read_file(here() + "/candidates/" + name); }

inline Task cpu_task(const std::string& name) {
  Task t;
  t.id = "test_" + name;
  t.reference = fs::read_file(here() + "/tasks/" + name + ".py");
  t.device = "cpu";
  return t;
}

inline JudgeConfig test_config() {
  JudgeConfig c;
  c.python = DICE_PYTHON;
  c.cache_root = std::string(DICE_BINARY_DIR) + "/judge_test_cache";
  c.device = "cpu";
  c.compile_workers = 2;
  c.executors = 1;
  c.compile_timeout_s = 300;
  c.exec_timeout_s = 60;
  c.trials = 3;
  c.seed = 1234;
  return c;
}

inline Job code_job(const Task& t, const std::string& code) {
  Job j;
  j.task = &t;
  j.text = code;
  j.is_code = true;
  return j;
}

}  // namespace dice::judge::testing
