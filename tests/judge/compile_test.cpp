// Compile pool: identical candidates build once (in-flight sharing and cache), keys depend on flags.
#include "dice/judge/compile_pool.h"
#include "dice/judge/judge.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <condition_variable>
#include <mutex>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/subprocess.h"
#include "judge/judge_testing.h"

using namespace dice::judge;

namespace {
// The suite's PCH root where tools/test.sh names it (a fixture: judge_cli_shared_pch finishes the
// judge's PCH there first): the pool's builds go through the fast builder, as a judge's do by
// default. The PCH key includes the toolchain, so these pools take the judge's probed identity
// there (with another name they would build a second PCH beside the judge's, minutes on a loaded
// machine). Without the root: no PCH, and the name "compile_test".
CompileSettings settings(const std::string& scratch) {
  CompileSettings s = dice::judge::testing::compile_settings(scratch);
  if (const char* shared = std::getenv("DICE_PCH_ROOT"); shared && *shared) {
    static const std::string judge_toolchain = probe_toolchain(s.python, s.harness_dir).identity;
    s.precompiled_header = true;
    s.pch_root = shared;
    s.toolchain = judge_toolchain;
  }
  return s;
}
}  // namespace

TEST(CompilePool, IdenticalCandidatesShareOneBuild) {
  std::string scratch = dice::fs::make_temp_dir("dice_cpool_");
  chmod(scratch.c_str(), 0755);
  CompileSettings s = settings(scratch);
  std::string code = dice::judge::testing::candidate("relu_honest.py");
  std::string path = scratch + "/cand.py";
  dice::fs::write_file(path, code);
  chmod(path.c_str(), 0644);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<CompileResult> results;
  {
    CompilePool pool(s);
    for (int i = 0; i < 3; ++i)
      pool.submit(path, code, [&](const CompileResult& r) {
        std::lock_guard<std::mutex> lk(mu);
        results.push_back(r);
        cv.notify_all();
      });
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return results.size() == 3; });
    // a later submission is answered from the finished job at once
    lk.unlock();
    pool.submit(path, code, [&](const CompileResult& r) {
      std::lock_guard<std::mutex> lk2(mu);
      results.push_back(r);
    });
    EXPECT_EQ(results.size(), 4u);
    EXPECT_NE(pool.job_key(code), pool.job_key(code + " "));
  }
  int builds = 0, hits = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.failure, Failure::kNone) << r.log_tail;
    builds += r.builds;
    hits += r.cache_hit;
    EXPECT_EQ(r.keys.size(), 1u);
    EXPECT_EQ(r.extensions.size(), 1u);  // digest of the call -> that key, for the executor
  }
  EXPECT_LE(builds, 1);
  EXPECT_GE(hits, 3);
  CompileSettings s2 = s;
  s2.extra_cflags = {"-O2"};
  CompilePool a(s), b(s2);
  EXPECT_NE(a.job_key(code), b.job_key(code));
  remove_tree(scratch);
}

// The PCH directory (headers, the fast builder's recipe, the dice_bind module) is built once; a
// candidate then builds through the fast builder (header "fast", called through dice_bind) and, with
// fast_build off, the plain load_inline way through the PCH ("full+pch"): both compute the right thing.
TEST(CompilePool, PrecompiledHeaderIsBuiltOnceAndGivesAWorkingExtension) {
  std::string scratch = dice::fs::make_temp_dir("dice_cpool_pch_");
  chmod(scratch.c_str(), 0755);
  for (const bool fast : {true, false}) {
    CompileSettings s = settings(scratch);
    s.precompiled_header = true;  // the suite's (see settings), else one kept in the test cache across runs
    s.fast_build = fast;
    // a fresh key every run (a macro: comments are not in the key), so this build is cold and must go
    // through the PCH
    std::string code = dice::judge::testing::candidate("relu_honest.py");
    code.insert(code.find("torch::Tensor relu_forward"), "#define DICE_TEST_RUN_" + std::to_string(getpid()) + "_" +
                                                              std::to_string(time(nullptr)) + "_" +
                                                              std::to_string(fast) + " 1\n");
    // and -O3, as many candidates ask: served by the -O2 PCH
    const std::string call = "functions=[\"relu_forward\"],";
    ASSERT_NE(code.find(call), std::string::npos);
    code.insert(code.find(call) + call.size(), " extra_cflags=[\"-O3\"],");
    std::string path = scratch + "/cand.py";
    dice::fs::write_file(path, code);
    chmod(path.c_str(), 0644);
    CompileResult res, twin;
    std::string pch;
    // the same sources with a link flag more: another extension, whose main.cpp (same text, same
    // compile command) the fast builder takes from the part cache instead of compiling it again
    std::string twin_code = code;
    twin_code.insert(twin_code.find(call) + call.size(), " extra_ldflags=[\"-lm\"],");
    dice::fs::write_file(scratch + "/twin.py", twin_code);
    chmod((scratch + "/twin.py").c_str(), 0644);
    {
      CompilePool pool(s);
      pch = pool.wait_for_pch();
      ASSERT_FALSE(pch.empty()) << "g++ did not accept the precompiled header";
      EXPECT_TRUE(dice::fs::exists(pch + "/dice_full.h.gch"));
      EXPECT_TRUE(dice::fs::exists(pch + "/recipe.json"));
      res = pool.compile(path, code);
      EXPECT_EQ(pool.fast_builds(), fast ? 1 : 0);
      EXPECT_EQ(pool.fallbacks(), 0);
      if (fast) twin = pool.compile(scratch + "/twin.py", twin_code);
    }
    if (fast) {
      ASSERT_EQ(twin.failure, Failure::kNone) << twin.log_tail;
      ASSERT_EQ(twin.keys.size(), 1u);
      EXPECT_NE(twin.keys[0], res.keys.at(0));
      EXPECT_EQ(twin.builds, 1);
      const std::string twin_entry = s.cache_root + "/" + twin.keys[0];
      auto twin_meta = nlohmann::json::parse(dice::fs::read_file(twin_entry + "/meta.json"));
      EXPECT_EQ(twin_meta.value("cached_parts", nlohmann::json::array()), nlohmann::json::array({"main"}))
          << twin_meta.dump();
      // the parts directory is the judge's: written by this process, read-only to the builders
      struct stat st;
      ASSERT_EQ(stat((s.cache_root + "/parts").c_str(), &st), 0);
      EXPECT_EQ(st.st_uid, geteuid());
      EXPECT_EQ(st.st_mode & 0777, 0755u);
      dice::judge::remove_tree(twin_entry);
    }
    ASSERT_EQ(res.failure, Failure::kNone) << res.log_tail;
    ASSERT_EQ(res.keys.size(), 1u);
    EXPECT_EQ(res.builds, 1);
    const std::string entry = s.cache_root + "/" + res.keys[0];
    auto meta = nlohmann::json::parse(dice::fs::read_file(entry + "/meta.json"));
    EXPECT_EQ(meta.value("header", ""), fast ? "fast" : "full+pch");
    const std::string binding = meta.value("binding", "");
    EXPECT_EQ(binding.empty(), !fast) << "a fast build is called through the judge's dice_bind module";
    if (fast) EXPECT_EQ(binding.rfind(pch + "/", 0), 0u) << binding;
    // the extension computes the right thing, loaded as the executor loads it
    dice::proc::SpawnOptions o;
    o.argv = {DICE_PYTHON, "-c",
              "import sys, torch\n"
              "sys.path.insert(0, sys.argv[4])\n"
              "import ext\n"
              "mod = ext.import_bound(sys.argv[1], sys.argv[2], sys.argv[3]) if sys.argv[3] else ext.import_so(sys.argv[1], sys.argv[2])\n"
              "x = torch.tensor([-1.0, 2.0, -3.0, 4.0])\n"
              "print(mod.relu_forward(x).tolist())\n",
              meta.value("name", ""), entry + "/" + meta.value("so", ""), binding,
              std::string(DICE_SOURCE_DIR) + "/src/judge/python"};
    o.inherit_env = true;
    auto r = dice::proc::run(o, 120);
    EXPECT_TRUE(r.status.exited && r.status.code == 0) << r.err;
    EXPECT_NE(r.out.find("[0.0, 2.0, 0.0, 4.0]"), std::string::npos) << r.out << r.err;
    dice::judge::remove_tree(entry);  // do not let one entry per run pile up in the test cache
  }
  remove_tree(scratch);
}

TEST(CompilePool, ExtensionKeysComeFromTheCheckedRequest) {
  CompileSettings s;
  s.toolchain = "t";
  nlohmann::json r = {{"cpp_sources", {"int f() { return 1; }"}}, {"functions", {{"f", "f"}}}};
  const std::string k = extension_key(s, r);
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(k, extension_key(s, nlohmann::json::parse(r.dump())));
  nlohmann::json extra = r;
  extra["not_a_field"] = "ignored";  // only the load_inline fields count
  EXPECT_EQ(k, extension_key(s, extra));
  nlohmann::json flags = r;
  flags["extra_cflags"] = {"-O3"};
  EXPECT_NE(k, extension_key(s, flags));
  CompileSettings s2 = s;
  s2.extra_cflags = {"-O2"};  // the judge's own flags
  EXPECT_NE(k, extension_key(s2, r));
  s2 = s;
  s2.toolchain = "another compiler";
  EXPECT_NE(k, extension_key(s2, r));
  s2 = s;
  s2.light_cuda = true;  // its .cu files may be built from other text
  EXPECT_NE(k, extension_key(s2, r));
  EXPECT_THROW(extension_key(s, nlohmann::json{{"cpp_sources", 5}}), dice::Error);
  EXPECT_THROW(extension_key(s, nlohmann::json{{"cpp_sources", {1, 2}}}), dice::Error);
  EXPECT_THROW(extension_key(s, nlohmann::json::array()), dice::Error);
}

TEST(CompilePool, SourceForKeyDropsCommentsAndBlankRunsOnly) {
  // comments -> one space, newlines inside them kept (so __LINE__ stays); runs of blanks -> one space
  EXPECT_EQ(source_for_key("int  f() {\t\treturn 1; }  // one\n"), "int f() { return 1; }\n");
  EXPECT_EQ(source_for_key("a/* x\n y */b"), "a\nb");
  EXPECT_EQ(source_for_key("a/**/b"), "a b");  // as the compiler reads it: two tokens, not "ab"
  EXPECT_EQ(source_for_key("a // c \\\n still the comment\nb"), "a\n\nb");
  EXPECT_EQ(source_for_key("    x =   1;\n  y = 2;  "), "x = 1;\ny = 2;");
  // literals stay byte for byte, comment-like text inside them too
  EXPECT_EQ(source_for_key("s = \"a  // b /* c */\";  c = '/';"), "s = \"a  // b /* c */\"; c = '/';");
  EXPECT_EQ(source_for_key("s = \"q\\\"  x\";"), "s = \"q\\\"  x\";");
  // two texts that differ only so have one key text; a change inside a literal or to a token does not
  EXPECT_EQ(source_for_key("int f(){return 1;}\n// note\n"), source_for_key("int f(){return 1;}   \n/* other */\n"));
  EXPECT_NE(source_for_key("s = \"a b\";"), source_for_key("s = \"a  b\";"));
  EXPECT_NE(source_for_key("x = a+b;"), source_for_key("x = a-b;"));
  EXPECT_NE(source_for_key("a\nb"), source_for_key("a b"));  // a newline is never a blank
  // what it does not handle with certainty comes back as it is
  for (const std::string s : {"auto s = R\"(a  b)\";", "int n = 1'000  ;", "auto w = L\"a  b\";", "x ??= y;  ", "#define A 1 \\  \n  + 2",
                              "#include <a//b.h>\n", "#  include </*x*/y>  ",
                              "s = \"open  ", "a /* open  ", "c = 'x  "})
    EXPECT_EQ(source_for_key(s), s) << s;
}

TEST(CompilePool, CandidatesThatDifferInCommentsAndLayoutBuildOnce) {
  std::string scratch = dice::fs::make_temp_dir("dice_cpool_");
  chmod(scratch.c_str(), 0755);
  CompileSettings s = settings(scratch);
  // a macro of its own per run keeps the keys fresh in the test cache, which outlives a run
  std::string code = dice::judge::testing::candidate("relu_honest.py");
  code.insert(code.find("torch::Tensor relu_forward"),
              "#define DICE_TEST_RUN_" + std::to_string(getpid()) + "_" + std::to_string(time(nullptr)) + " 1\n");
  std::string variant = code;
  for (size_t at = variant.find("\n  "); at != std::string::npos; at = variant.find("\n  ", at + 4))
    variant.replace(at, 3, "\n    ");  // deeper indentation (Python too: the whole file shifts alike)
  const size_t fn = variant.find("torch::Tensor");
  ASSERT_NE(fn, std::string::npos);
  variant.insert(fn, "/* a sample's own remark */ ");
  const size_t eol = variant.find('\n', variant.find("xc.numel();"));
  ASSERT_NE(eol, std::string::npos);
  variant.insert(eol, "   // and another, at the end of a line");
  ASSERT_NE(variant, code);
  CompilePool pool(s);
  auto compile = [&](const std::string& name, const std::string& text) {
    std::string path = scratch + "/" + name;
    dice::fs::write_file(path, text);
    chmod(path.c_str(), 0644);
    return pool.compile(path, text);
  };
  CompileResult a = compile("a.py", code), b = compile("b.py", variant);
  ASSERT_EQ(a.failure, Failure::kNone) << a.log_tail;
  ASSERT_EQ(b.failure, Failure::kNone) << b.log_tail;
  ASSERT_EQ(a.keys.size(), 1u);
  ASSERT_EQ(b.keys.size(), 1u);
  EXPECT_EQ(a.keys[0], b.keys[0]);  // one cache entry for both
  EXPECT_EQ(b.builds, 0);           // the second was not compiled again
  // each candidate's own call digest maps to that key, so each executor finds it
  EXPECT_EQ(b.extensions.size(), 1u);
  EXPECT_NE(a.extensions.begin()->first, b.extensions.begin()->first);
  // a change to a token builds anew
  std::string other = code;
  const size_t zero = other.find(": 0.f");
  ASSERT_NE(zero, std::string::npos);
  other.replace(zero, 5, ": 1.f");
  CompileResult c = compile("c.py", other);
  ASSERT_EQ(c.failure, Failure::kNone) << c.log_tail;
  EXPECT_NE(c.keys.at(0), a.keys[0]);
  EXPECT_EQ(c.builds, 1);
  remove_tree(scratch);
}

// Sources the compiler rejected are kept as <key>.error in the cache, and a later pool on that cache
// (the next run, the next eval) answers them from there without compiling: the answer carries what
// the kept file says.
TEST(CompilePool, ACompileErrorIsKeptInTheCacheForTheNextPool) {
  std::string scratch = dice::fs::make_temp_dir("dice_cpool_err_");
  chmod(scratch.c_str(), 0755);
  CompileSettings s = settings(scratch);
  const std::string unknown = "dice_undeclared_" + std::to_string(getpid()) + "_" + std::to_string(time(nullptr));
  std::string code = dice::judge::testing::candidate("relu_honest.py");
  const size_t zero = code.find(": 0.f");
  ASSERT_NE(zero, std::string::npos);
  code.replace(zero, 5, ": " + unknown);  // an identifier no header declares
  const std::string path = scratch + "/cand.py";
  dice::fs::write_file(path, code);
  chmod(path.c_str(), 0644);
  CompileResult first;
  {
    CompilePool pool(s);
    first = pool.compile(path, code);
  }
  ASSERT_EQ(first.failure, Failure::kCompileError) << first.log_tail;
  EXPECT_NE(first.log_tail.find(unknown), std::string::npos) << first.log_tail;
  std::string kept;
  for (const auto& e : std::filesystem::directory_iterator(s.cache_root)) {
    const std::string p = e.path().string();
    if (p.size() > 6 && p.compare(p.size() - 6, 6, ".error") == 0 &&
        dice::fs::read_file(p).find(unknown) != std::string::npos)
      kept = p;
  }
  ASSERT_FALSE(kept.empty()) << "no <key>.error in " << s.cache_root << " names " << unknown;
  struct stat st;
  ASSERT_EQ(lstat(kept.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & (S_IWGRP | S_IWOTH), 0u);
  // the next pool reads the kept answer (marked here, so that a fresh compile would show)
  dice::fs::write_file(kept, "cand.py:1: error: the kept answer " + unknown);
  {
    CompilePool pool(s);
    CompileResult again = pool.compile(path, code);
    EXPECT_EQ(again.failure, Failure::kCompileError);
    EXPECT_NE(again.log_tail.find("the kept answer"), std::string::npos) << again.log_tail;
    EXPECT_EQ(again.builds, 0);
  }
  ::unlink(kept.c_str());
  remove_tree(scratch);
}
