#pragma once
// The kernel judge (DESIGN §5): trusted C++ that turns candidates into Verdicts.
//
//   Judge judge(cfg, "/path/to/python");
//   std::vector<Verdict> v = judge.judge(jobs, [](size_t done, size_t total) { ... });
//
// For each job: extract the code (when given a response), run the static checks, build the
// candidate's extension in the compile pool (content-hash cache), then check and time it in a
// sandboxed executor. Compilation of later candidates overlaps execution of earlier ones.
// A hostile or broken candidate only ever produces a Verdict with a failure class.
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dice/judge/compile_pool.h"
#include "dice/judge/sandbox.h"
#include "dice/judge/static_check.h"
#include "dice/judge/task.h"
#include "dice/judge/verdict.h"

namespace dice::judge {

struct JudgeConfig {
  std::string python = "";            // "" = $DICE_PYTHON, else the build's DICE_PYTHON, else python3
  std::string harness_dir = "";       // "" = <source dir>/src/judge/python
  std::string scratch_root = "";      // "" = a fresh temp dir
  std::string cache_root = "";        // "" = <scratch_root>/cache (set it to keep builds across runs)
  std::string pch_root = "";          // "" = $DICE_PCH_ROOT, else cache_root: where the precompiled headers go
  std::string exchange_dir = "auto";  // auto | scratch | DIR: where executors and the reference exchange tensors
  std::string device = "auto";        // auto | cpu | cuda: which tasks this judge serves
  std::string bytecode_cache = "auto";  // auto | always | off: torch's bytecode under <cache_root>/pycache
  int compile_workers = 0;            // 0 = auto: the CPUs this rank may use, less the executors (>= 2)
  int executors = 0;                  // 0 = auto: on a GPU half those CPUs, at most 8; on CPUs a quarter (>= 1)
  int spares = 0;                     // 0 = auto: candidate processes started ahead per slot (2 on a GPU, 1 on CPUs)
  double compile_timeout_s = 300;
  double exec_timeout_s = 60;
  int trials = 3;                     // correctness trials, each with a fresh hidden seed
  double atol = -1, rtol = -1;        // < 0: per-dtype defaults (fp32 1e-4, fp16/bf16 1e-2)
  bool timing = false;
  int warmup = 3;                     // timed-protocol calls before the timed ones (checked too)
  int iters = 10;                     // timed calls (median); each on fresh hidden inputs, each checked
  double plausible_speedup = 10;      // KernelBench flags > 10x: re-measured in a fresh process, flagged
  std::string own_kernel = "reject";  // off | warn | reject: forward's work must include the candidate's own kernel
  std::string library_ops = "auto";   // off | warn | reject | auto (reject on level-1 tasks, warn above):
                                      // ATen compute ops in forward outside the extension
  std::string kernel_record = "auto";  // auto | cupti: a GPU candidate's own kernels counted by its
                                       // fast-built extensions (CUPTI for the rest), or always CUPTI
  bool light_headers = true;          // no PCH ready: try torch/types.h + pybind first, then torch/extension.h
  bool light_cuda = false;            // .cu files: first without their own torch/extension.h (nvcc has no PCH)
  bool precompiled_header = true;     // torch/extension.h from a PCH built once per toolchain under pch_root
                                      // (ext.py); only with a cache_root that outlives the judge
  bool stand_in_torch = true;         // compile step: the module first runs under a stand-in for torch
  bool fast_build = true;             // fastbuild.py (needs the PCH): no torch import or ninja per build,
                                      // a .cu's device code built without the torch headers
  std::vector<std::string> extra_cflags;
  std::vector<std::string> extra_cuda_cflags;
  int max_jobs = 2;                   // ninja jobs per build
  std::string static_check = "on";    // off | warn (report only) | on (per-check modes below)
  StaticCheckConfig static_checks;    // per-check off / warn / reject
  uint64_t seed = 0;                  // 0 = hidden seeds from std::random_device
  std::string reward = "exec";        // exec | speedup | graded (reward.h)
  double tau = 1.0;                   // speedup threshold (speedup) / cap (graded)
  std::string reuse_verdicts = "cache";  // off | process | cache: the same code for the same task under the
                                         // same settings gets its earlier verdict (verdict_memo.h)
  SandboxConfig sandbox;

  template <class V> void visit(V& v) {
    v("python", python, "Python interpreter with torch for the compile and executor harness");
    v("harness_dir", harness_dir, "directory of compile.py / runner.py / reference.py");
    v("scratch_root", scratch_root, "where scratch dirs are made");
    v("cache_root", cache_root, "content-addressed build cache");
    v("pch_root", pch_root, "where the precompiled torch headers and the fast builder's recipe are built, once "
                            "per toolchain (~700 MB): \"\" = $DICE_PCH_ROOT if set, else cache_root. One "
                            "directory shared by several runs (or cache roots) builds them once for all");
    v("exchange_dir", exchange_dir, "where each executor slot's tensor files go (inputs, outputs: GiBs per call "
                                    "on large tasks): auto = a fresh directory in /dev/shm when it is a tmpfs with "
                                    "room for every slot and sandboxes see it, else under scratch_root; scratch; "
                                    "or a directory");
    v.choice("device", device, {"auto", "cpu", "cuda"}, "device the candidates run on");
    v.choice("bytecode_cache", bytecode_cache, {"auto", "always", "off"},
             "Python bytecode of torch and the harness compiled once into <cache_root>/pycache and read by "
             "every process the judge starts: auto = when torch has none beside its sources (else each "
             "`import torch` compiles ~1,000 modules: seconds of CPU per candidate process)");
    v("compile_workers", compile_workers, "parallel builds (0 = auto from the CPUs this rank may use)");
    v("executors", executors, "executor slots, each a reference process and fresh candidate processes "
                              "(0 = auto; on a GPU their timed calls never overlap)");
    v("spares", spares, "candidate processes each executor slot keeps starting ahead of the evaluations "
                        "(import torch, CUDA context): 0 = auto (2 on a GPU, 1 on CPUs)");
    v("compile_timeout_s", compile_timeout_s, "wall limit per build");
    v("exec_timeout_s", exec_timeout_s, "wall limit per evaluation");
    v("trials", trials, "correctness trials with fresh seeds");
    v("atol", atol, "absolute tolerance (<0: per dtype)");
    v("rtol", rtol, "relative tolerance (<0: per dtype)");
    v("timing", timing, "time candidate and reference");
    v("warmup", warmup, "warm-up calls before timing");
    v("iters", iters, "timed calls (median)");
    v("plausible_speedup", plausible_speedup, "speedups above this are re-measured in a fresh process and flagged");
    v.choice("own_kernel", own_kernel, {"off", "warn", "reject"},
             "run-time check that forward ran the candidate's own kernel (not only library ops)");
    v.choice("library_ops", library_ops, {"off", "warn", "reject", "auto"},
             "run-time check for ATen compute ops in forward outside the candidate's extension "
             "(auto: reject on level-1 tasks, where one op is the whole task; warn above, where partial fusions are normal)");
    v.choice("kernel_record", kernel_record, {"auto", "cupti"},
             "how a GPU candidate's own kernels are seen for own_kernel: auto = the launches its fast-built "
             "extensions count (the profiler's CUPTI record only for extensions that do not count every "
             "launch), cupti = always the profiler's CUDA kernel record");
    v("light_headers", light_headers, "without a precompiled header: try lighter torch headers first");
    v("light_cuda", light_cuda, "compile .cu files first without their torch/extension.h include, then as written");
    v("precompiled_header", precompiled_header, "precompile torch/extension.h once per toolchain");
    v("stand_in_torch", stand_in_torch, "compile step: run the candidate's module under a stand-in for torch "
                                        "first (no `import torch`); a module that needs more of torch runs again "
                                        "with the real one");
    v("fast_build", fast_build, "build with fastbuild.py when the precompiled header is ready (falls back to "
                                "the plain load_inline build for what it does not understand)");
    v("extra_cflags", extra_cflags, "judge-added C++ flags (part of the cache key)");
    v("extra_cuda_cflags", extra_cuda_cflags, "judge-added nvcc flags (part of the cache key)");
    v("max_jobs", max_jobs, "ninja jobs per build");
    v.choice("static_check", static_check, {"off", "warn", "on"}, "static anti-hack checks: off, warn only, on");
    v("static_checks", static_checks, "per-check modes (off / warn / reject)");
    v("seed", seed, "0 = hidden random seeds; else reproducible seeds");
    v.choice("reward", reward, {"exec", "speedup", "graded"}, "reward function (reward.h)");
    v("tau", tau, "speedup threshold (speedup) or cap (graded)");
    v.choice("reuse_verdicts", reuse_verdicts, {"off", "process", "cache"},
             "a candidate whose code equals one judged before for the same task, under the same settings, "
             "toolchain and dice build, gets that verdict again without being built or run (marked reused; "
             "only correct verdicts and failures the code itself decides, never a timeout, crash or limit): "
             "process = within this run; cache = also across runs through <cache_root>/verdicts when "
             "timing is off; off = judge every batch afresh");
    v("sandbox", sandbox, "sandbox settings");
  }
  void validate() const;
};

struct Job {
  const Task* task = nullptr;
  std::string text;        // the model's response, or the code itself
  bool is_code = false;    // true: `text` is the candidate file
};

using ProgressFn = std::function<void(size_t done, size_t total)>;
// Called once per job as soon as its verdict is final (in completion order, one call at a time).
using VerdictFn = std::function<void(size_t job, const Verdict& verdict)>;
// Static checks: findings for one candidate (default: judge::static_check with cfg.static_checks).
using StaticChecker = std::function<std::vector<Finding>(const Task& task, const std::string& code)>;

// $DICE_PYTHON, else the interpreter the build found; the harness shipped with the sources.
std::string default_python();
// The judge's Python and harness as probe.py finds them: the toolchain identity that keys the build
// cache and the precompiled headers (probe.py's last line), and whether torch's bytecode sits beside
// its sources. Throws when that Python cannot import torch.
struct Toolchain {
  std::string identity;
  bool bytecode_in_place = true;
};
Toolchain probe_toolchain(const std::string& python, const std::string& harness_dir);
std::string default_harness_dir();

// The candidate file inside a response: its FIRST fenced code block (the DICE/KernelBench rule,
// see text::extract_code_block); "" when there is none.
std::string extract_candidate_code(const std::string& response);

class Judge {
 public:
  explicit Judge(JudgeConfig cfg);
  ~Judge();
  std::vector<Verdict> judge(const std::vector<Job>& jobs, const ProgressFn& progress = nullptr,
                             const VerdictFn& on_verdict = nullptr);
  void set_static_checker(StaticChecker checker) { static_checker_ = std::move(checker); }
  const JudgeConfig& config() const { return cfg_; }
  const std::string& toolchain() const { return toolchain_; }
  // Protections the sandbox could not apply on this machine (empty when all were applied).
  const std::vector<std::string>& protections_missing() const { return missing_; }
  int executor_restarts() const;
  // Blocks until the compile pool's background PCH build ended; its directory ("" = none).
  std::string wait_for_pch();
  // Builds made by the fast builder, and builds it handed to the plain builder, so far.
  int fast_builds() const;
  // Seconds per phase of compile jobs and evaluations so far, summed over workers and executors.
  std::map<std::string, PhaseTotals::Total> phases() const;
  int build_fallbacks() const;
  int plain_builds() const;  // fallbacks included

 private:
  struct Impl;
  JudgeConfig cfg_;
  std::string toolchain_;
  std::vector<std::string> missing_;
  StaticChecker static_checker_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::judge
