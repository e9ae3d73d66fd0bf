#pragma once
// Executor slot (DESIGN §5 trust zones): evaluates one candidate at a time with two processes.
//
//  - the reference process (src/judge/python/reference.py, trusted, kept across evaluations):
//    no candidate code ever runs in it. It makes every call's inputs from a hidden seed, runs the
//    reference on them, and compares the candidate's output file with the reference output.
//  - a candidate process (src/judge/python/runner.py, sandboxed, ONE evaluation, then killed):
//    loads the candidate, and for each call reads the staged inputs, runs ModelNew, writes its
//    outputs into the one file it may write outside its scratch. A fresh one (with a fresh
//    scratch directory) is started for every evaluation, ahead of time so the torch import overlaps.
//
// Every call is the same call (trials, warm-ups and timed calls alike: fresh hidden inputs, the
// output checked). After each answer the executor freezes the candidate process (SIGSTOP), checks
// from /proc that no thread or child process is left, and only then has the reference process read
// the output. Timing: the candidate's own clock is cross-checked against the executor's host clock
// (calibrated by the reference, timed by the same code on inputs of the same sizes); a speedup above
// `plausible_speedup` is measured again in a fresh process and flagged.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dice/judge/sandbox.h"
#include "dice/judge/verdict.h"
#include "dice/util/subprocess.h"
#include "dice/util/timer.h"

namespace dice::judge {

// The GPU's turns between executor slots that share it: untimed work (loading, correctness trials,
// comparisons) may overlap; a timed call (the reference's and the candidate's, with their
// calibration) runs alone. Fair: a waiting timed call holds back new untimed work.
class GpuGate {
 public:
  void lock_shared();
  void unlock_shared();
  void lock();
  void unlock();

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int readers_ = 0, waiting_writers_ = 0;
  bool writer_ = false;
};

struct ExecutorSettings {
  std::string python;
  std::string harness_dir;
  std::string scratch_root;
  std::string exchange_root;  // where the slot's exchange directory goes ("" = scratch_root)
  std::string cache_root;
  bool cuda = false;
  bool always_cupti = false;  // judge.kernel_record = cupti: CUDA kernels recorded by CUPTI for every candidate
  // Candidate processes kept starting ahead (each imports torch and, on a GPU, makes its CUDA context
  // while earlier evaluations run): as many as an evaluation is shorter than a process start.
  int spares = 1;
  double start_timeout_s = 120;  // interpreter + torch import
  double plausible_speedup = 10;  // above: measured again in a fresh process, flagged
  // A call past its time limit is a timeout only once the candidate itself used that much CPU time,
  // or the wall clock passed `wall_factor` times the limit: a busy machine is not the candidate's fault.
  double wall_factor = 3;
  std::shared_ptr<GpuGate> gpu_gate;  // shared by the slots on one GPU (null: no turns)
  SandboxConfig sandbox;
  int uid = -1;
  std::shared_ptr<PhaseTotals> phases;  // seconds per phase of an evaluation, summed (null: not kept)
  std::vector<std::string> extra_env;  // for the candidate and reference processes (PYTHONPYCACHEPREFIX)
};

struct ExecOutcome {
  Failure failure = Failure::kNone;
  // max_abs_error, runtime_ms, ref_runtime_ms, host_ms, ref_host_ms, speedup, speedup_host,
  // flags [...], evidence {...} (op record, when asked for)
  nlohmann::json reply;
  std::string log_tail;
  double seconds = 0;
};

class Executor {
 public:
  Executor(ExecutorSettings s, int slot);
  ~Executor();
  // One evaluation. request: reference, candidate (paths), cache_root, extensions, init_seed,
  // seeds (correctness trials), warmup_seeds + timing_seeds (timed calls; empty = no timing),
  // remeasure_seeds (for an implausible speedup), atol, rtol, record_ops. ahead: evaluations after
  // this one that this slot may still get (the caller's estimate; -1 = unknown): it starts no more
  // processes ahead than that, so none is left unused when a batch ends (each costs seconds of CPU).
  ExecOutcome run(const nlohmann::json& request, double timeout_s, int ahead = -1);
  // Candidate processes that ended abnormally (crash, timeout, violation) so far.
  int restarts() const { return restarts_; }
  // Candidate processes started so far (one per evaluation, plus the warm spares).
  int processes_started() const { return started_; }

  class Candidate;  // one sandboxed runner process (executor.cpp)

 private:
  struct Pass;
  std::unique_ptr<Candidate> take_candidate();
  void start_spares(int want);
  void ensure_reference();
  bool evaluate(const nlohmann::json& req, const std::vector<uint64_t>& seeds, size_t timed_from, Pass& pass,
                ExecOutcome& out, double deadline_s);

  ExecutorSettings s_;
  int slot_;
  std::string xchg_;  // exchange directory: init.bin and in.bin (reference writes), out.bin (candidate)
  std::unique_ptr<proc::Subprocess> ref_;
  std::deque<std::unique_ptr<Candidate>> spares_;  // started ahead, oldest first
  int ahead_ = -1;  // run()'s estimate of the evaluations to come
  int restarts_ = 0;
  int started_ = 0;
};

}  // namespace dice::judge
