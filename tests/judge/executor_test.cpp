// Executor: answers requests, survives a candidate that kills it (recycled), enforces its timeout.
#include "dice/judge/executor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "dice/judge/judge.h"
#include "dice/util/fs.h"
#include "judge/judge_testing.h"

using namespace dice::judge;

TEST(Executor, ServesRecyclesAndTimesOut) {
  Task relu = dice::judge::testing::cpu_task("relu");
  std::string scratch = dice::fs::make_temp_dir("dice_exec_");
  chmod(scratch.c_str(), 0755);
  auto put = [&](const std::string& name, const std::string& text) {
    std::string p = scratch + "/" + name;
    dice::fs::write_file(p, text);
    chmod(p.c_str(), 0644);
    return p;
  };
  std::string ref = put("ref.py", relu.reference);
  std::string good = put("good.py", dice::judge::testing::candidate("relu_honest.py"));
  std::string dies = put("dies.py", dice::judge::testing::candidate("hostile_os_exit.py"));
  std::string spins = put("spins.py", dice::judge::testing::candidate("hostile_infinite_loop.py"));
  // The compile step builds the honest relu extension (shared test cache); the executor is told
  // which build each load_inline call gets.
  CompileSettings cs = dice::judge::testing::compile_settings(scratch);
  CompileResult built;
  {
    CompilePool pool(cs);
    built = pool.compile(good, dice::judge::testing::candidate("relu_honest.py"));
  }
  ASSERT_EQ(built.failure, Failure::kNone) << built.log_tail;
  ASSERT_EQ(built.extensions.size(), 1u);

  ExecutorSettings es;
  es.python = DICE_PYTHON;
  es.harness_dir = std::string(DICE_SOURCE_DIR) + "/src/judge/python";
  es.scratch_root = scratch;
  es.cache_root = cs.cache_root;
  es.uid = resolve_uid_base(es.sandbox, es.python);
  Executor ex(es, 0);
  auto request = [&](const std::string& cand) {
    return nlohmann::json{{"task_id", "relu"}, {"reference", ref}, {"candidate", cand},
                          {"cache_root", cs.cache_root}, {"extensions", built.extensions}, {"device", "cpu"},
                          {"init_seed", 1}, {"seeds", {2, 3}}, {"timing", false}};
  };
  auto a = ex.run(request(good), 60);
  EXPECT_EQ(a.failure, Failure::kNone) << a.log_tail;
  EXPECT_EQ(a.reply.value("max_abs_error", -1.0), 0.0);
  auto b = ex.run(request(dies), 60);
  EXPECT_EQ(b.failure, Failure::kCrash) << b.log_tail;
  auto c = ex.run(request(spins), 3);
  EXPECT_EQ(c.failure, Failure::kTimeout) << c.log_tail;
  // stopped once it used 3 s of CPU itself, or at 3x the limit on the wall clock; the rest is the
  // next process's start (an import of torch on a busy machine)
  EXPECT_LT(c.seconds, 3 * 3 + 20);
  auto d = ex.run(request(good), 60);
  EXPECT_EQ(d.failure, Failure::kNone) << d.log_tail;
  EXPECT_GE(ex.restarts(), 2);
  // a request for an extension the compile step never built is a load error, not a rebuild
  std::string code = dice::judge::testing::candidate("relu_honest.py");
  code.replace(code.find("o[i] = in[i]"), 12, "o[i] = 1.f*in[i]");
  auto e = ex.run(request(put("unbuilt.py", code)), 60);
  EXPECT_EQ(e.failure, Failure::kLoadError) << e.log_tail;
  remove_tree(scratch);
}

// The evaluating process writes its outputs into one file: the sandbox's file-size limit for what
// candidate code writes (file_size_mb) does not cap them; output_file_mb does, with a sentence
// naming it. (hostile_big_file.py checks that candidate code still writes under file_size_mb.)
// (On the GPU node the built-in CUDA tasks' 512 MiB outputs got "File too large" under 256 MiB.)
TEST(Executor, OutputsBeyondFileSizeLimitNamedSetting) {
  std::string scratch = dice::fs::make_temp_dir("dice_exec_out_");
  chmod(scratch.c_str(), 0755);
  std::string reference = dice::judge::testing::cpu_task("relu").reference;
  reference = dice::judge::testing::replace_all(reference, "N = 1003", "N = 600003");  // 2.3 MiB out
  std::string ref = scratch + "/ref.py", good = scratch + "/good.py";
  std::string code = dice::judge::testing::candidate("relu_honest.py");
  dice::fs::write_file(ref, reference);
  dice::fs::write_file(good, code);
  chmod(ref.c_str(), 0644);
  chmod(good.c_str(), 0644);
  CompileSettings cs = dice::judge::testing::compile_settings(scratch);
  CompileResult built;
  {
    CompilePool pool(cs);
    built = pool.compile(good, code);
  }
  ASSERT_EQ(built.failure, Failure::kNone) << built.log_tail;
  auto judge_with = [&](long output_file_mb) {
    ExecutorSettings es;
    es.python = DICE_PYTHON;
    es.harness_dir = std::string(DICE_SOURCE_DIR) + "/src/judge/python";
    es.scratch_root = scratch;
    es.cache_root = cs.cache_root;
    es.sandbox.file_size_mb = 1;
    es.sandbox.output_file_mb = output_file_mb;
    es.uid = resolve_uid_base(es.sandbox, es.python);
    Executor ex(es, 0);
    return ex.run(nlohmann::json{{"task_id", "relu_big"}, {"reference", ref}, {"candidate", good},
                                 {"cache_root", cs.cache_root}, {"extensions", built.extensions},
                                 {"device", "cpu"}, {"init_seed", 1}, {"seeds", {2}}, {"timing", false}},
                  60);
  };
  auto fits = judge_with(8);
  EXPECT_EQ(fits.failure, Failure::kNone) << fits.log_tail;
  auto too_big = judge_with(1);
  EXPECT_EQ(too_big.failure, Failure::kResourceLimit) << too_big.log_tail;
  EXPECT_NE(too_big.log_tail.find("judge.sandbox.output_file_mb (1 MiB)"), std::string::npos) << too_big.log_tail;
  remove_tree(scratch);
}
