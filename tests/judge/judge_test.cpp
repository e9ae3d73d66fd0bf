// Judge end to end on honest CPU candidates; verdict JSON; rewards; code extraction.
#include "dice/judge/judge.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "dice/judge/reward.h"
#include "dice/judge/sandbox.h"
#include "dice/judge/verdict_memo.h"
#include "dice/util/error.h"
#include "judge/judge_testing.h"

using namespace dice::judge;
using namespace dice::judge::testing;

TEST(Judge, HonestCandidatesAreCorrectAndIdenticalOnesAreJudgedOnce) {
  Task relu = cpu_task("relu"), rowsum = cpu_task("rowsum");
  JudgeConfig cfg = test_config();
  cfg.timing = true;
  cfg.iters = 5;
  Judge judge(cfg);
  std::string response = "Here is my kernel:\n```python\n" + candidate("relu_honest.py") + "```\nDone.";
  std::vector<Job> jobs = {code_job(relu, candidate("relu_honest.py")), code_job(rowsum, candidate("rowsum_honest.py")),
                           code_job(relu, candidate("relu_honest.py"))};
  Job from_response;
  from_response.task = &relu;
  from_response.text = response;
  jobs.push_back(from_response);
  size_t last_done = 0;
  auto v = judge.judge(jobs, [&](size_t done, size_t total) {
    EXPECT_EQ(total, 4u);
    last_done = done;
  });
  EXPECT_EQ(last_done, 4u);
  ASSERT_EQ(v.size(), 4u);
  for (const auto& x : v) {
    EXPECT_TRUE(x.extracted);
    EXPECT_TRUE(x.compiled) << x.log_tail;
    EXPECT_TRUE(x.correct) << failure_name(x.failure) << ": " << x.log_tail;
    EXPECT_EQ(x.failure, Failure::kNone);
    EXPECT_GE(x.max_abs_error, 0);
    EXPECT_LT(x.max_abs_error, 1e-4);
    EXPECT_GT(x.runtime_ms, 0);
    EXPECT_GT(x.ref_runtime_ms, 0);
    EXPECT_GT(x.speedup, 0);
    EXPECT_EQ(reward(x, RewardKind::kExec, 1.0), 1.0);
  }
  EXPECT_EQ(v[0].task_id, "test_relu");
  EXPECT_EQ(v[1].task_id, "test_rowsum");
  // the second and third relu candidates (the same code, once inside a response) were not built or
  // run again: they carry the first one's verdict
  EXPECT_EQ(v[0].same_as, -1);
  EXPECT_EQ(v[1].same_as, -1);
  EXPECT_GT(v[0].exec_s, 0);
  for (size_t i : {2, 3}) {
    EXPECT_EQ(v[i].same_as, 0) << i;
    EXPECT_TRUE(v[i].cache_hit) << i;
    EXPECT_EQ(v[i].exec_s, 0) << i;
    EXPECT_EQ(v[i].runtime_ms, v[0].runtime_ms) << i;
  }
  // a later batch with the same code is judged afresh (fresh hidden seeds), from the build cache
  auto later = judge.judge({code_job(relu, candidate("relu_honest.py"))});
  EXPECT_TRUE(later[0].correct) << later[0].log_tail;
  EXPECT_EQ(later[0].same_as, -1);
  EXPECT_TRUE(later[0].cache_hit);
  EXPECT_GT(later[0].exec_s, 0);
}

TEST(Judge, NoCodeAndCompileError) {
  Task relu = cpu_task("relu");
  // a cache root relative to the working directory (`--set judge.cache_root=runs/x/cache`) names the
  // same place to the builders and the candidate processes, which run elsewhere
  JudgeConfig cfg = test_config();
  cfg.cache_root = std::filesystem::relative(cfg.cache_root).string();
  ASSERT_FALSE(std::filesystem::path(cfg.cache_root).is_absolute());
  Judge judge(cfg);
  EXPECT_TRUE(std::filesystem::path(judge.config().cache_root).is_absolute()) << judge.config().cache_root;
  Job prose;
  prose.task = &relu;
  prose.text = "I could not write a kernel for this.";
  auto v = judge.judge({prose, code_job(relu, candidate("compile_error.py")), code_job(relu, candidate("relu_honest.py"))});
  EXPECT_TRUE(v[2].correct) << failure_name(v[2].failure) << ": " << v[2].log_tail;
  EXPECT_EQ(v[0].failure, Failure::kNoCode);
  EXPECT_FALSE(v[0].extracted);
  EXPECT_EQ(v[1].failure, Failure::kCompileError);
  EXPECT_FALSE(v[1].compiled);
  EXPECT_NE(v[1].log_tail.find("this_method_does_not_exist"), std::string::npos) << v[1].log_tail;
  EXPECT_EQ(reward(v[1], RewardKind::kExec, 1.0), 0.0);
}

TEST(Judge, CompileTimeoutIsItsOwnClass) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.compile_timeout_s = 8;
  cfg.cache_root = "";  // private cache: this build must really start
  Judge judge(cfg);
  std::string code = candidate("relu_honest.py");
  code.replace(code.find("relu_forward(torch::Tensor x) {"), 31, "relu_forward(torch::Tensor x) { /* timeout */");
  auto v = judge.judge({code_job(relu, code)});
  EXPECT_EQ(v[0].failure, Failure::kCompileTimeout) << failure_name(v[0].failure) << v[0].log_tail;
}

// judge.bytecode_cache: torch's and the harness's bytecode compiled once into <cache_root>/pycache,
// and every Python the judge starts (here the candidate process) reads from there.
TEST(Judge, BytecodeCacheServesThePythonsItStarts) {
  Task relu = cpu_task("relu");
  JudgeConfig cfg = test_config();
  cfg.bytecode_cache = "always";
  const std::string dir = cfg.cache_root + "/pycache";
  const std::string tell = replace_all(candidate("relu_honest.py"), "        return relu_ext.relu_forward(x)",
                                       "        import sys\n        raise RuntimeError('prefix=' + str(sys.pycache_prefix))");
  Judge judge(cfg);
  auto v = judge.judge({code_job(relu, candidate("relu_honest.py")), code_job(relu, tell)});
  EXPECT_TRUE(v[0].correct) << failure_name(v[0].failure) << ": " << v[0].log_tail;
  EXPECT_EQ(v[1].failure, Failure::kRuntimeError) << failure_name(v[1].failure) << ": " << v[1].log_tail;
  EXPECT_NE(v[1].log_tail.find("prefix=" + dir), std::string::npos) << v[1].log_tail;
  bool torch_init = false, harness = false, stamp = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string(), parent = e.path().parent_path().string();
    torch_init |= name.rfind("__init__.cpython", 0) == 0 && e.path().parent_path().filename() == "torch";
    harness |= name.rfind("harness.cpython", 0) == 0 && parent.size() > 16 &&
               parent.compare(parent.size() - 16, 16, "src/judge/python") == 0;
    stamp |= name.rfind("compiled-", 0) == 0 && parent == dir;
  }
  EXPECT_TRUE(torch_init && harness && stamp) << torch_init << harness << stamp;
}

// judge.reuse_verdicts: the same code for the same task under the same settings gets its earlier
// verdict, within a judge and (cache, timing off) in a later judge on the same cache root; files of
// the memo that others may write are not believed; timed verdicts stay within their judge.
TEST(Judge, ReusesVerdictsOfIdenticalCandidates) {
  Task relu = cpu_task("relu");
  // code no earlier run judged (a comment: a new verdict key, the same build from the test cache)
  const std::string run = "# run " + std::to_string(getpid()) + "_" + std::to_string(time(nullptr)) + "\n";
  const std::string honest = run + candidate("relu_honest.py");
  const std::string wrong = replace_all(honest, "in[i] > 0.f ? in[i] : 0.f", "in[i] > 1.f ? in[i] : 0.f");
  ASSERT_NE(wrong, honest);
  JudgeConfig cfg = test_config();
  cfg.reuse_verdicts = "cache";
  // the memo's files this test writes (the test cache keeps those of earlier runs)
  auto memo_files = [&] {
    std::set<std::string> files;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(cfg.cache_root + "/verdicts", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file()) files.insert(it->path().string());
    return files;
  };
  const std::set<std::string> before = memo_files();
  std::vector<Verdict> first;
  {
    Judge judge(cfg);
    first = judge.judge({code_job(relu, honest), code_job(relu, wrong)});
    ASSERT_TRUE(first[0].correct) << failure_name(first[0].failure) << ": " << first[0].log_tail;
    ASSERT_EQ(first[1].failure, Failure::kWrongValue) << failure_name(first[1].failure) << ": " << first[1].log_tail;
    for (const auto& v : first) {
      EXPECT_FALSE(v.reused);
      EXPECT_GT(v.exec_s, 0);
    }
    auto again = judge.judge({code_job(relu, wrong), code_job(relu, honest)});
    EXPECT_TRUE(again[0].reused && again[1].reused);
    EXPECT_EQ(again[0].failure, Failure::kWrongValue);
    EXPECT_TRUE(again[1].correct);
    EXPECT_EQ(again[0].exec_s + again[1].exec_s, 0);
    EXPECT_EQ(again[0].max_abs_error, first[1].max_abs_error);
    nlohmann::json j = again[0];
    EXPECT_EQ(j.value("reused", false), true);
  }
  {  // a later judge on the same cache: from <cache_root>/verdicts
    Judge judge(cfg);
    auto later = judge.judge({code_job(relu, honest), code_job(relu, wrong)});
    EXPECT_TRUE(later[0].reused && later[0].correct) << failure_name(later[0].failure);
    EXPECT_TRUE(later[1].reused && later[1].failure == Failure::kWrongValue) << failure_name(later[1].failure);
  }
  // the memo's files: this user's, not writable by others; one made group-writable is not believed
  std::vector<std::string> ours;
  for (const auto& f : memo_files()) {
    if (before.count(f)) continue;
    struct stat st;
    ASSERT_EQ(stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_uid, geteuid());
    EXPECT_EQ(st.st_mode & 0022, 0u) << f;
    ours.push_back(f);
  }
  EXPECT_EQ(ours.size(), 2u);
  {
    JudgeConfig timed = cfg;  // timing on: reused within this judge only, never written or read across
    timed.timing = true;
    timed.iters = 2;
    Judge judge(timed);
    auto a = judge.judge({code_job(relu, honest)});
    auto b = judge.judge({code_job(relu, honest)});
    EXPECT_FALSE(a[0].reused);
    EXPECT_GT(a[0].runtime_ms, 0);
    EXPECT_TRUE(b[0].reused);
    EXPECT_EQ(b[0].runtime_ms, a[0].runtime_ms);
  }
  for (const auto& f : ours) chmod(f.c_str(), 0664);
  {
    Judge judge(cfg);
    auto v = judge.judge({code_job(relu, wrong)});
    EXPECT_FALSE(v[0].reused) << "a verdict file others may write was believed";
    EXPECT_EQ(v[0].failure, Failure::kWrongValue);
    EXPECT_GT(v[0].exec_s, 0);
  }
  for (const auto& f : ours) std::remove(f.c_str());  // one pair per run would pile up in the test cache
  JudgeConfig off = cfg;
  off.reuse_verdicts = "off";
  Judge judge(off);
  auto v = judge.judge({code_job(relu, honest)});
  EXPECT_FALSE(v[0].reused);
  EXPECT_GT(v[0].exec_s, 0);
}

// Which verdicts are kept: those the code decides, not those a machine's state can cause.
TEST(VerdictMemo, KeepsOnlyWhatTheCodeDecides) {
  const std::string dir = dice::fs::make_temp_dir("dice_memo_test_");
  Task t = cpu_task("relu");
  VerdictMemo memo("identity 1", dir), other("identity 2", dir);
  EXPECT_NE(memo.key(t, "code"), other.key(t, "code"));
  EXPECT_NE(memo.key(t, "code"), memo.key(t, "code "));
  Task t2 = t;
  t2.reference += "\n";
  EXPECT_NE(memo.key(t, "code"), memo.key(t2, "code"));
  int k = 0;
  for (Failure f : {Failure::kNone, Failure::kWrongValue, Failure::kCompileError, Failure::kTimeout, Failure::kCrash,
                    Failure::kResourceLimit, Failure::kJudgeError, Failure::kSandboxViolation, Failure::kCompileTimeout}) {
    Verdict v;
    v.task_id = t.id;
    v.failure = f;
    v.correct = f == Failure::kNone;
    const std::string key = memo.key(t, "code " + std::to_string(k++));
    memo.put(key, v);
    const bool kept = f == Failure::kNone || f == Failure::kWrongValue || f == Failure::kCompileError;
    EXPECT_EQ(memo.find(key, t.id).has_value(), kept) << failure_name(f);
    VerdictMemo fresh("identity 1", dir);  // from the directory
    auto back = fresh.find(key, t.id);
    EXPECT_EQ(back.has_value(), kept) << failure_name(f);
    if (back) EXPECT_EQ(back->failure, f);
    EXPECT_FALSE(fresh.find(key, "another_task").has_value());
  }
  Verdict oom;
  oom.task_id = t.id;
  oom.failure = Failure::kRuntimeError;
  oom.log_tail = "CUDA out of memory. Tried to allocate 2.00 GiB";
  EXPECT_FALSE(VerdictMemo::keepable(oom));
  oom.log_tail = "IndexError: index 4 is out of bounds";
  EXPECT_TRUE(VerdictMemo::keepable(oom));
  Verdict killed;  // a compiler the machine killed: not the code's doing
  killed.failure = Failure::kCompileError;
  killed.log_tail = "main.cpp:3: error: ...\nc++: fatal error: Killed signal terminated program cc1plus";
  EXPECT_FALSE(VerdictMemo::keepable(killed));
  oom.reused = true;
  EXPECT_FALSE(VerdictMemo::keepable(oom));
  VerdictMemo memory_only("identity 1", "");
  Verdict ok;
  ok.task_id = t.id;
  ok.correct = true;
  memory_only.put(memory_only.key(t, "x"), ok);
  EXPECT_TRUE(memory_only.find(memory_only.key(t, "x"), t.id).has_value());
  EXPECT_FALSE(VerdictMemo("identity 1", dir).find(memo.key(t, "x"), t.id).has_value());
  dice::judge::remove_tree(dir);
}

TEST(Verdict, JsonRoundTrip) {
  Verdict v;
  v.task_id = "t1";
  v.extracted = true;
  v.findings = {{"try_except", "reject", "line 3: try:"}};
  v.compiled = true;
  v.correct = false;
  v.max_abs_error = 0.5;
  v.failure = Failure::kWrongValue;
  v.log_tail = "max abs error";
  v.compile_s = 1.5;
  v.cache_hit = true;
  v.same_as = 3;
  nlohmann::json j = v;
  EXPECT_EQ(j["failure"], "wrong_value");
  Verdict back = j.get<Verdict>();
  EXPECT_EQ(back.task_id, "t1");
  EXPECT_EQ(back.failure, Failure::kWrongValue);
  ASSERT_EQ(back.findings.size(), 1u);
  EXPECT_EQ(back.findings[0].check, "try_except");
  EXPECT_DOUBLE_EQ(back.max_abs_error, 0.5);
  EXPECT_TRUE(back.cache_hit);
  EXPECT_EQ(back.same_as, 3);
  EXPECT_FALSE(nlohmann::json(Verdict{}).contains("same_as"));
  EXPECT_EQ(nlohmann::json(Verdict{}).get<Verdict>().same_as, -1);
  EXPECT_THROW(failure_from_name("bogus"), dice::Error);
  nlohmann::json bad = {{"task_id", "x"}, {"failure", "bogus"}};
  EXPECT_THROW(bad.get<Verdict>(), dice::Error);
  for (int f = 0; f <= static_cast<int>(Failure::kJudgeError); ++f)
    EXPECT_EQ(static_cast<int>(failure_from_name(failure_name(static_cast<Failure>(f)))), f);
}

TEST(Reward, Definitions) {
  Verdict ok;
  ok.compiled = ok.correct = true;
  ok.speedup = 2.0;
  Verdict wrong = ok;
  wrong.correct = false;
  wrong.failure = Failure::kWrongValue;
  EXPECT_EQ(reward(ok, RewardKind::kExec, 1.5), 1.0);
  EXPECT_EQ(reward(wrong, RewardKind::kExec, 1.5), 0.0);
  EXPECT_EQ(reward(ok, RewardKind::kSpeedup, 1.5), 1.0);
  EXPECT_EQ(reward(ok, RewardKind::kSpeedup, 2.5), 0.0);
  EXPECT_EQ(reward(wrong, RewardKind::kSpeedup, 0.5), 0.0);
  Verdict slow = ok;
  slow.speedup = 0.5;
  EXPECT_DOUBLE_EQ(reward(slow, RewardKind::kGraded, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(reward(ok, RewardKind::kGraded, 2.0), 1.0);
  Verdict fast = ok;
  fast.speedup = 100;
  EXPECT_DOUBLE_EQ(reward(fast, RewardKind::kGraded, 4.0), 1.0);  // clipped
  Verdict mid = ok;
  mid.speedup = 2.0;
  EXPECT_DOUBLE_EQ(reward(mid, RewardKind::kGraded, 4.0), 0.75);
  EXPECT_EQ(reward(wrong, RewardKind::kGraded, 2.0), 0.0);
  EXPECT_EQ(reward_kind_from_name("graded"), RewardKind::kGraded);
  EXPECT_THROW(reward_kind_from_name("fast"), dice::Error);
}

TEST(Extract, TakesTheFirstFencedBlock) {
  std::string r = "text\n```python\nprint(1)\n```\nmore\n```python\nclass ModelNew:\n  pass\n```\n```bash\nls\n```\n";
  EXPECT_EQ(extract_candidate_code(r), "print(1)\n");
  EXPECT_EQ(extract_candidate_code("```py\nx = 1\n```"), "x = 1\n");
  EXPECT_EQ(extract_candidate_code("no code here"), "");
  EXPECT_EQ(extract_candidate_code("```python\nclass ModelNew: pass"), "class ModelNew: pass\n");  // truncated answer
}
