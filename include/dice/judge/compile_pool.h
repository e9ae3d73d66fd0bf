#pragma once
// Compile pool (DESIGN §5): builds candidates' load_inline extensions ahead of execution, in
// parallel, into a build cache keyed by SHA-256 of (sources + flags + toolchain identity).
// Identical candidates submitted while one is building share that build; later ones hit the cache.
//
// Who writes the cache: only this (trusted) process. A candidate's module code runs in a sandboxed
// compile step (compile.py) that turns each load_inline call into a build request; the pool
// computes the key itself, builds the request in a separate sandboxed builder that runs no
// candidate code (ext.py build, as its own uid), copies the .so into <cache_root>/<key>/ and
// answers with the key. Sandboxed processes can only read the cache, so no candidate can plant a
// binary under the key of another candidate's sources.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <deque>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dice/judge/sandbox.h"
#include "dice/judge/verdict.h"
#include "dice/util/timer.h"

namespace dice::judge {

struct CompileSettings {
  std::string python;
  std::string harness_dir;   // holds compile.py / ext.py
  std::string cache_root;    // build cache (shared, persistent)
  std::string pch_root;      // where make-pch builds the PCH directory ("" = cache_root)
  std::string scratch_root;  // per-worker scratch dirs are made under it
  std::string toolchain;     // identity string folded into every key
  int workers = 2;
  double timeout_s = 300;
  bool light_headers = true;
  bool light_cuda = false;   // ext.py: .cu first without its torch/extension.h include
  std::vector<std::string> extra_cflags, extra_cuda_cflags;
  int max_jobs = 2;          // ninja jobs per build
  bool cuda = false;
  SandboxConfig sandbox;
  int uid_base = -1;         // resolved
  int slot_offset = 0;       // uid slot of worker 0; builders use the next `workers` slots
  int max_extensions = 8;    // load_inline calls (distinct builds) allowed per candidate
  std::vector<std::string> extra_env;  // e.g. TORCH_CUDA_ARCH_LIST=9.0, ccache PATH
  // Build torch/extension.h (and, for CUDA, the host headers) as PCHs once per toolchain and cache,
  // with the fast builder's recipe and the dice_bind module (from the first submit(), outside the
  // sandbox: it compiles only the judge's own code). With fast_build, builds wait for it (before
  // their time limit starts); otherwise builds started after it is ready use it.
  bool precompiled_header = true;
  // Build through fastbuild.py when the PCH directory holds its recipe: no torch import, no ninja,
  // a .cu's device code without the torch headers; what it does not understand is built as written.
  bool fast_build = true;
  bool stand_in_torch = true;  // compile step: the candidate's module first under stubtorch.py
  std::shared_ptr<PhaseTotals> phases;  // seconds per phase of a compile job, summed (null: not kept)
};

struct CompileResult {
  Failure failure = Failure::kNone;  // kNone, kCompileError, kCompileTimeout, kLoadError, kTimeout, kCrash, kResourceLimit
  std::string log_tail;
  double seconds = 0;
  bool cache_hit = false;      // every extension came from the cache (or the candidate shared a build)
  int builds = 0;              // extensions actually compiled by this job
  std::vector<std::string> keys;                    // cache keys, in call order
  std::map<std::string, std::string> extensions;    // call digest -> cache key (for the executor)
};

// The cache key of one load_inline build request (its normalised arguments) under these settings.
// Sources count as the compiler reads them (source_for_key): samples that differ only in comments
// or in runs of spaces build once.
std::string extension_key(const CompileSettings& s, const nlohmann::json& request);

// C++/CUDA source text for the cache key: each run of spaces, tabs and comments becomes one space
// between tokens and nothing at the start or end of a line; the newlines inside comments stay (so
// __LINE__ does); string and character literals stay byte for byte. The compiler does the same
// before it reads a token, so two sources with one normalised text are one program. Text this does not handle with certainty (raw strings,
// a quote after a letter or digit: prefixed literals, digit separators; trigraph-like "??"; a
// comment or literal left open; "\" and blanks before a newline; "//" or "/*" on an #include <>
// line) is returned as it is.
std::string source_for_key(const std::string& src);

// A file this user keeps in the judge's cache: a regular file (not a link) of this user that no one
// else may write, at most 1 MiB; false (text untouched) for anything else.
bool read_kept_file(const std::string& file, std::string& text);

// Whether a compiler's or a process's output shows a machine limit (a killed process, memory,
// processes, disk, an internal compiler error) that a later try on a quieter machine may not meet.
bool shows_machine_limit(const std::string& text);

class CompilePool {
 public:
  explicit CompilePool(CompileSettings s);
  ~CompilePool();
  // Candidate file path + its content key; `done` runs on a pool thread when the result is known.
  void submit(const std::string& candidate_path, const std::string& code,
              std::function<void(const CompileResult&)> done);
  // submit() and wait for the result.
  CompileResult compile(const std::string& candidate_path, const std::string& code);
  // Key of a candidate's compile job (code + flags + toolchain).
  std::string job_key(const std::string& code) const;
  // Starts the PCH build if needed and blocks until it ended; its directory, "" when there is none.
  std::string wait_for_pch();
  // Extensions built so far by the fast builder, and builds it handed to the plain builder.
  int fast_builds() const { return fast_builds_.load(); }
  int fallbacks() const { return fallbacks_.load(); }
  int plain_builds() const { return plain_builds_.load(); }  // fallbacks included

 private:
  struct Job {
    std::string path;
    bool finished = false;
    CompileResult result;
    std::vector<std::function<void(const CompileResult&)>> waiters;
  };
  struct Build {  // one extension key: built (or found) once, answers every request for it
    bool done = false;
    Failure failure = Failure::kNone;
    std::string log;
  };
  struct BuildReply {
    Failure failure = Failure::kNone;
    std::string key, log;
    bool cache_hit = true;
    bool fast = false;  // built by fastbuild.py
    double seconds = 0;
  };
  void worker(int index);
  // A python harness run under `sandbox` (MAX_JOBS and extra_env set, every CPU allowed).
  proc::SpawnOptions python_options(const SandboxConfig& sandbox, const std::vector<std::string>& args,
                                    const std::string& scratch, int uid) const;
  CompileResult compile_one(const std::string& path, int index);
  BuildReply ensure_built(const nlohmann::json& request, int index, double deadline);
  BuildReply build_and_publish(const std::string& key, const nlohmann::json& request, int index, double deadline);
  void publish_parts(const nlohmann::json& res, const std::string& build_dir, int index);
  std::map<std::string, std::shared_ptr<Build>> builds_;  // guarded by mu_
  std::condition_variable build_cv_;

  CompileSettings s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // job keys
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  void build_pch();
  void start_pch_locked();  // starts build_pch() once, unless done (caller holds mu_)
  std::condition_variable pch_cv_;  // separate from cv_: a notify_one meant for a worker must not land here
  bool pch_done_ = false;
  std::string pch_dir_;    // guarded by mu_
  std::thread pch_thread_;
  std::atomic<int> fast_builds_{0}, fallbacks_{0}, plain_builds_{0};
};

}  // namespace dice::judge
