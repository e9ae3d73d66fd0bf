#pragma once
// Shared helpers of the judge tests: CPU tasks and candidates under tests/judge, and a judge
// config whose build cache lives in the build tree (so builds are reused across tests and runs).
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "dice/judge/compile_pool.h"
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

// The build cache of the judge tests: in the build tree, or DICE_TEST_CACHE_ROOT (the runs as an
// unprivileged user, tests/judge/as_user.sh: a judge uses only cache entries its own user made).
inline std::string test_cache_root() {
  const char* env = std::getenv("DICE_TEST_CACHE_ROOT");
  return env && *env ? std::string(env) : std::string(DICE_BINARY_DIR) + "/judge_test_cache";
}

inline JudgeConfig test_config() {
  JudgeConfig c;
  c.python = DICE_PYTHON;
  c.cache_root = test_cache_root();
  c.device = "cpu";
  c.compile_workers = 2;
  c.executors = 1;
  c.compile_timeout_s = 300;
  c.exec_timeout_s = 60;
  c.trials = 3;
  c.seed = 1234;
  c.reuse_verdicts = "off";  // these tests judge afresh what they judge again (Judge.ReusesVerdicts* turn it on)
  return c;
}

// A compile pool on the shared test cache (no PCH: only the PCH test builds one, ~45 s of CPU).
inline CompileSettings compile_settings(const std::string& scratch) {
  CompileSettings s;
  s.python = DICE_PYTHON;
  s.harness_dir = std::string(DICE_SOURCE_DIR) + "/src/judge/python";
  s.cache_root = test_cache_root();
  s.scratch_root = scratch;
  s.toolchain = "compile_test";
  s.workers = 2;
  s.precompiled_header = false;
  s.uid_base = resolve_uid_base(s.sandbox, s.python);
  make_cache_dir(s.cache_root);
  return s;
}

// A candidate's text with every `from` (a placeholder such as "@CANARY@") replaced by `to`.
inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

inline Job code_job(const Task& t, const std::string& code) {
  Job j;
  j.task = &t;
  j.text = code;
  j.is_code = true;
  return j;
}

}  // namespace dice::judge::testing
