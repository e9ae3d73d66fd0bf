// The judge: extraction -> static checks -> compile pool -> executors -> verdict rules.
#include "dice/judge/judge.h"

#include "dice/judge/doctor.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "dice/config/config.h"
#include "dice/judge/executor.h"
#include "dice/judge/verdict_memo.h"
#include "dice/text/chat.h"
#include "dice/util/cleanup.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/home.h"
#include "dice/util/log.h"
#include "dice/util/subprocess.h"
#include "dice/util/timer.h"

#ifndef DICE_PYTHON
#define DICE_PYTHON "python3"
#endif

namespace dice::judge {

namespace stdfs = std::filesystem;

void JudgeConfig::validate() const {
  DICE_REQUIRE(compile_workers >= 0, "judge.compile_workers must be >= 0 (0 = auto), got ", compile_workers);
  DICE_REQUIRE(executors >= 0, "judge.executors must be >= 0 (0 = auto), got ", executors);
  DICE_REQUIRE(spares >= 0, "judge.spares must be >= 0 (0 = auto), got ", spares);
  DICE_REQUIRE(trials >= 1, "judge.trials must be >= 1, got ", trials);
  DICE_REQUIRE(compile_timeout_s > 0 && exec_timeout_s > 0, "judge timeouts must be positive");
  DICE_REQUIRE(iters >= 1 && warmup >= 0, "judge.iters must be >= 1 and judge.warmup >= 0");
  DICE_REQUIRE(max_jobs >= 1, "judge.max_jobs must be >= 1, got ", max_jobs);
  DICE_REQUIRE(plausible_speedup > 1, "judge.plausible_speedup must be > 1, got ", plausible_speedup);
}

std::string extract_candidate_code(const std::string& response) {
  auto block = text::extract_code_block(response);
  return block ? block->code : std::string();
}

std::string default_python() {
  if (const char* p = std::getenv("DICE_PYTHON"); p && *p) return p;
  return DICE_PYTHON;
}

std::string default_harness_dir() { return util::home_dir() + "/src/judge/python"; }

int ranks_on_this_node() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* e = std::getenv(v);
    if (e && *e) {
      char* end = nullptr;
      long n = std::strtol(e, &end, 10);
      if (end != e && n >= 1 && n <= 4096) return static_cast<int>(n);
    }
  }
  return 1;
}

Toolchain probe_toolchain(const std::string& python, const std::string& harness_dir) {
  proc::SpawnOptions o;
  o.argv = {python, harness_dir + "/probe.py"};
  o.inherit_env = true;
  auto r = proc::run(o, 120);
  DICE_REQUIRE(r.status.exited && r.status.code == 0, "the judge's Python (", python,
               ") cannot import torch or run ", harness_dir, "/probe.py: ", proc::tail(r.err, 600));
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  size_t nl = out.rfind('\n');
  return {nl == std::string::npos ? out : out.substr(nl + 1),
          out.find("bytecode_in_place false") == std::string::npos};
}

namespace {

// torch's bytecode (and the harness's) compiled into dir by the judge's Python, as this process's
// user, before any sandboxed process starts; a stamp per toolchain skips it next time.
void compile_bytecode(const std::string& python, const std::string& harness_dir, const std::string& dir,
                      const std::string& toolchain) {
  const std::string stamp = dir + "/compiled-" + hash::sha256_hex(toolchain + harness_dir).substr(0, 16);
  if (fs::exists(stamp)) return;
  Timer t;
  proc::SpawnOptions o;
  o.argv = {python, harness_dir + "/bytecode.py", dir};
  o.inherit_env = true;
  auto r = proc::run(o, 600);
  DICE_REQUIRE(r.status.exited && r.status.code == 0, "judge: compiling Python bytecode into ", dir, " failed: ",
               proc::tail(r.err, 600));
  fs::write_file_atomic(stamp, toolchain + "\n");
  log::info("judge: Python bytecode of torch and the harness compiled into ", dir, " in ", t.elapsed_s(), " s");
}

void make_dir(const std::string& path, mode_t mode) {
  std::error_code ec;
  stdfs::create_directories(path, ec);
  DICE_REQUIRE(!ec, "cannot create directory '", path, "': ", ec.message());
  chmod(path.c_str(), mode);
}

// The harness's Python files (name and text), hashed: a changed harness judges anew (VerdictMemo).
std::string harness_digest(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : stdfs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".py" && e.path().string().find("__pycache__") == std::string::npos)
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  hash::Sha256 h;
  for (const auto& f : files) {
    const std::string text = fs::read_file(f);
    h.update(str(f.size() - dir.size(), ":", f.substr(dir.size()), text.size(), ":"));
    h.update(text);
  }
  return h.hex_digest();
}

// This program's file (size and time): a rebuilt dice judges anew (VerdictMemo).
std::string program_identity() {
  struct stat st;
  if (stat("/proc/self/exe", &st) != 0) return "unknown";
  return str(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

// Content-addressed file under dir (readable by the sandbox uids).
std::string store_file(const std::string& dir, const std::string& content) {
  std::string path = str(dir, "/", hash::sha256_hex(content).substr(0, 32), ".py");
  if (!fs::exists(path)) {
    fs::write_file_atomic(path, content);
    chmod(path.c_str(), 0644);
  }
  return path;
}

std::string op_list(const nlohmann::json& counts) {
  std::vector<std::pair<long, std::string>> v;
  for (auto& [name, n] : counts.items()) v.emplace_back(-n.get<long>(), name);
  std::sort(v.begin(), v.end());
  std::string s;
  for (size_t i = 0; i < v.size() && i < 6; ++i) s += str(i ? ", " : "", v[i].second, " x", -v[i].first);
  return s.empty() ? "none" : s;
}

// Room an executor slot's tensor files may take: the task's inputs (in.bin), one candidate output and
// the reference's (a built-in CUDA task moves 1 GiB in and 0.5 GiB out per call).
constexpr uint64_t kExchangeBytesPerSlot = 3ull << 30;

// Bytes the memory cgroup of this process may still take (a Slurm job's --mem), or UINT64_MAX where
// no limit is found. Files in a tmpfs are charged to it and cannot be written back to make room.
uint64_t cgroup_memory_left() {
  auto number = [](const std::string& path, uint64_t& v) {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    v = std::strtoull(s.c_str(), nullptr, 10);
    return true;
  };
  uint64_t left = UINT64_MAX;
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {  // id:controllers:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::string base, limit_file, usage_file;
    if (controllers.empty()) {
      base = "/sys/fs/cgroup", limit_file = "memory.max", usage_file = "memory.current";  // v2
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      base = "/sys/fs/cgroup/memory", limit_file = "memory.limit_in_bytes", usage_file = "memory.usage_in_bytes";
    } else {
      continue;
    }
    for (const std::string& dir : {base + path, base}) {  // the path, or the root of a namespaced view
      uint64_t limit = 0, usage = 0;
      if (!number(dir + "/" + limit_file, limit)) continue;
      if (limit < (1ull << 60)) {  // a v1 cgroup without a limit reads 2^63 rounded to pages
        number(dir + "/" + usage_file, usage);  // 0 where unknown
        left = std::min(left, limit > usage ? limit - usage : 0);
      }
      break;
    }
  }
  return left;
}

// Why /dev/shm cannot hold the executors' tensor files ("" = it can).
std::string shm_unfit(int executors, const SandboxConfig& sandbox) {
  struct statfs sf;
  if (statfs("/dev/shm", &sf) != 0) return "no /dev/shm";
  if (sf.f_type != TMPFS_MAGIC) return "/dev/shm is not a tmpfs";
  const uint64_t free = static_cast<uint64_t>(sf.f_bavail) * sf.f_bsize;
  const uint64_t need = kExchangeBytesPerSlot * static_cast<uint64_t>(executors);
  if (free < need)
    return str("/dev/shm has ", free >> 20, " MiB free, ", need >> 20, " MiB wanted for ", executors, " slot(s)");
  const uint64_t left = cgroup_memory_left();
  if (left < 2 * need)  // the tensors themselves also live in this memory
    return str("this job's memory limit (cgroup) leaves ", left >> 20, " MiB, ", 2 * (need >> 20), " MiB wanted for ",
               executors, " slot(s)");
  // A private /dev on the root file system is a bind of /dev alone: /dev/shm is not in the sandbox.
  struct stat dev, root;
  if (sandbox.enabled && sandbox.private_dev && stat("/dev", &dev) == 0 && stat("/", &root) == 0 &&
      dev.st_dev == root.st_dev)
    return "sandboxed processes would not see /dev/shm (a private /dev on the root file system)";
  if (access("/dev/shm", W_OK | X_OK) != 0) return "/dev/shm is not writable";
  return "";
}

// The executors exchange GiBs of tensors per call with the reference through files. On a disk the
// kernel writes them back although each lives seconds: on the GPU node 8 slots wrote 1.5 GB/s and
// waited on it (40 % iowait). In a tmpfs they are memory. Returns the directory made ("" = the
// slots' own directories under scratch_root).
std::string make_exchange_root(const std::string& setting, int executors, const SandboxConfig& sandbox) {
  std::string base = setting;
  if (setting == "scratch") return "";
  if (setting == "auto") {
    const std::string why = shm_unfit(executors, sandbox);
    if (!why.empty()) {
      log::info("judge: tensor files under scratch_root (", why, ")");
      return "";
    }
    base = "/dev/shm";
  }
  std::string dir = fs::make_temp_dir("dice_xchg_", base);
  chmod(dir.c_str(), 0755);  // the sandbox uids read inputs there and write their own output file
  log::info("judge: tensor files in ", dir, setting == "auto" ? " (tmpfs)" : "");
  return dir;
}

// The run-time own-kernel rules (judge.own_kernel, judge.library_ops) on the op record of all calls.
void apply_kernel_rules(const JudgeConfig& cfg, const Task& task, bool cuda, const nlohmann::json& ev, Verdict& v) {
  auto finding = [&](const std::string& mode, const char* check, const std::string& detail) {
    if (mode == "off") return;
    v.findings.push_back({check, mode == "reject" ? "reject" : "warn", detail});
    if (mode == "reject" && v.failure == Failure::kNone) {
      v.failure = Failure::kNoOwnKernel;
      v.correct = false;
      v.speedup = v.speedup_host = -1;
      v.log_tail = str(check, ": ", detail);
    }
  };
  const auto none = nlohmann::json::object();
  if (ev.value("min_ext_calls", 0L) == 0) {
    finding(cfg.own_kernel, "own_kernel",
            "forward ran without calling a function of the candidate's extension; ATen compute ops: " +
                op_list(ev.value("aten_outside", none)));
  } else if (ev.value("calls_all_wrappers", 0L) > 0) {
    finding(cfg.own_kernel, "own_kernel",
            str("the extension only ran ATen compute ops (", op_list(ev.value("aten_inside", none)), ") in ",
                ev.value("calls_all_wrappers", 0L), " of ", ev.value("calls", 0L), " calls"));
  } else if (cuda && ev.value("min_own_kernels", -1L) == 0) {
    finding(cfg.own_kernel, "own_kernel",
            "no CUDA kernel of the candidate's own ran; library kernels: " + op_list(ev.value("library_kernels", none)));
  }
  const auto outside = ev.value("aten_outside", none);
  std::string library_ops = cfg.library_ops;
  if (library_ops == "auto") library_ops = task.level <= 1 ? "reject" : "warn";
  if (!outside.empty() && v.failure == Failure::kNone)
    finding(library_ops, "library_ops", "ATen compute ops in forward outside the extension: " + op_list(outside));
}

}  // namespace

struct Judge::Impl {
  std::string files_dir;
  bool cuda = false;
  int uid_base = -1;
  bool unsandboxed = false;  // user namespace refused and judge.sandbox.allow_unsandboxed: every verdict says so
  std::unique_ptr<CompilePool> pool;
  std::vector<std::unique_ptr<Executor>> executors;
  std::mt19937_64 rng;
  std::string owned_scratch;  // removed on destruction when the judge made it
  std::unique_ptr<cleanup::ScratchGuard> scratch_guard;  // ... and on SIGINT / SIGTERM / SIGHUP
  std::string exchange_root;  // the executors' tensor files ("" = under scratch_root); made and removed here
  std::unique_ptr<cleanup::ScratchGuard> exchange_guard;
  std::shared_ptr<PhaseTotals> phases = std::make_shared<PhaseTotals>();  // compile and execution
  std::unique_ptr<VerdictMemo> memo;  // judge.reuse_verdicts (null: off)
};

Judge::Judge(JudgeConfig cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  cfg_.validate();
  if (cfg_.python.empty()) cfg_.python = default_python();
  if (cfg_.harness_dir.empty()) cfg_.harness_dir = default_harness_dir();
  DICE_REQUIRE(fs::exists(cfg_.harness_dir + "/runner.py") && fs::exists(cfg_.harness_dir + "/reference.py"),
               "judge.harness_dir '", cfg_.harness_dir, "' does not contain runner.py and reference.py");
  if (cfg_.scratch_root.empty()) {
    cfg_.scratch_root = fs::make_temp_dir("dice_judge_");
    impl_->owned_scratch = cfg_.scratch_root;
    impl_->scratch_guard = std::make_unique<cleanup::ScratchGuard>(cfg_.scratch_root);
  }
  make_dir(cfg_.scratch_root, 0755);
  const bool private_cache = cfg_.cache_root.empty();  // gone with this judge
  if (private_cache) cfg_.cache_root = cfg_.scratch_root + "/cache";
  make_dir(cfg_.cache_root, 0755);  // only this process writes builds here; sandboxes read them
  // builders, candidate and reference processes run in other directories: a relative root
  // (`--set judge.cache_root=runs/x/cache`) would name another place to each of them
  cfg_.cache_root = std::filesystem::absolute(cfg_.cache_root).lexically_normal().string();
  cfg_.scratch_root = std::filesystem::absolute(cfg_.scratch_root).lexically_normal().string();
  if (cfg_.pch_root.empty()) {  // one PCH for several runs' caches (e.g. a test suite, or runs/judge_pch)
    const char* env = std::getenv("DICE_PCH_ROOT");
    cfg_.pch_root = env && *env && !private_cache ? env : cfg_.cache_root;
  }
  make_dir(cfg_.pch_root, 0755);
  cfg_.pch_root = std::filesystem::absolute(cfg_.pch_root).lexically_normal().string();
  impl_->files_dir = cfg_.scratch_root + "/files";
  make_dir(impl_->files_dir, 0755);

  const Toolchain probed = probe_toolchain(cfg_.python, cfg_.harness_dir);
  toolchain_ = probed.identity;
  std::vector<std::string> python_env;  // for every Python the judge starts
  if (cfg_.bytecode_cache == "always" || (cfg_.bytecode_cache == "auto" && !probed.bytecode_in_place)) {
    const std::string dir = cfg_.cache_root + "/pycache";
    make_dir(dir, 0755);
    if (!probed.bytecode_in_place)
      log::info("judge: torch in ", cfg_.python, " has no bytecode beside its sources: every Python the judge "
                "starts reads it from ", dir);
    compile_bytecode(cfg_.python, cfg_.harness_dir, dir, toolchain_);
    python_env.push_back("PYTHONPYCACHEPREFIX=" + dir);
  }
  auto tc = nlohmann::json::parse(toolchain_, nullptr, false);
  bool cuda_available = !tc.is_discarded() && tc.value("cuda_available", false);
  impl_->cuda = cfg_.device == "cuda" || (cfg_.device == "auto" && cuda_available);
  DICE_REQUIRE(!(impl_->cuda && !cuda_available), "judge.device is cuda but torch in ", cfg_.python,
               " sees no GPU");
  {
    // Workers and executors from the CPUs this rank may use (the node's, shared by its ranks). On a GPU
    // an evaluation mostly waits (on the GPU, on its partner process), so half of them are executors;
    // on CPUs a candidate computes on a core itself, and builds take most of them.
    const int ranks = ranks_on_this_node();
    const int cpus = std::max(1, proc::cpus_online() / ranks);
    std::string chosen;
    if (cfg_.executors == 0) {
      cfg_.executors = impl_->cuda ? std::clamp(cpus / 2, 1, 8) : std::clamp(cpus / 4, 1, 64);
      chosen += " executors";
    }
    if (cfg_.compile_workers == 0) {
      cfg_.compile_workers = std::max(2, cpus - cfg_.executors);
      chosen += " compile_workers";
    }
    if (cfg_.spares == 0) {
      cfg_.spares = impl_->cuda ? 2 : 1;
      chosen += " spares";
    }
    log::info("judge: ", cfg_.compile_workers, " compile workers, ", cfg_.executors, " executor slot(s)",
              impl_->cuda ? " on one GPU (timed calls one at a time)" : "", ", ", cfg_.spares,
              " candidate process(es) started ahead per slot; ", cpus, " CPUs for this rank",
              ranks > 1 ? str(" (", proc::cpus_online(), " on the node, ", ranks, " ranks)") : std::string(),
              chosen.empty() ? std::string() : "; chosen automatically:" + chosen);
  }
  static_checker_ = [this](const Task& task, const std::string& code) {
    return static_check(code, task.device, cfg_.static_checks.for_level(task.level));
  };
  impl_->uid_base = resolve_uid_base(cfg_.sandbox, cfg_.python);
  // Not root: the sandbox is a user namespace; where it is refused, stop before any candidate runs.
  impl_->unsandboxed = require_user_namespace(cfg_.sandbox);
  if (uses_user_namespace(cfg_.sandbox) && !impl_->unsandboxed)
    log::info("judge: not root: candidates run in a user namespace of their own (",
              describe_sandbox(cfg_.sandbox, -1), ")");
  if (impl_->uid_base >= 0) {
    for (const auto& p : {cfg_.cache_root, cfg_.pch_root, cfg_.scratch_root, cfg_.harness_dir + "/runner.py"}) {
      if (!readable_by_others(p)) {
        log::warn("judge: ", p, " is not reachable by other users; sandboxed processes keep uid ", geteuid(),
                  " (no per-slot process limit)");
        impl_->uid_base = -1;
        break;
      }
    }
  }
  impl_->rng.seed(cfg_.seed ? cfg_.seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}());

  CompileSettings cs;
  cs.python = cfg_.python;
  cs.harness_dir = cfg_.harness_dir;
  cs.cache_root = cfg_.cache_root;
  cs.pch_root = cfg_.pch_root;
  cs.scratch_root = cfg_.scratch_root;
  cs.toolchain = toolchain_;
  cs.workers = cfg_.compile_workers;
  cs.phases = impl_->phases;
  cs.timeout_s = cfg_.compile_timeout_s;
  cs.light_headers = cfg_.light_headers;
  cs.light_cuda = cfg_.light_cuda;
  // A PCH pays off across runs and long runs; a private cache is deleted with this judge.
  cs.precompiled_header = cfg_.precompiled_header && !private_cache;
  cs.fast_build = cfg_.fast_build;
  cs.stand_in_torch = cfg_.stand_in_torch;
  cs.extra_cflags = cfg_.extra_cflags;
  cs.extra_cuda_cflags = cfg_.extra_cuda_cflags;
  cs.max_jobs = cfg_.max_jobs;
  cs.cuda = impl_->cuda;
  cs.sandbox = cfg_.sandbox;
  cs.uid_base = impl_->uid_base;
  cs.slot_offset = cfg_.executors;  // executors take slots 0..executors-1
  if (impl_->cuda && !tc.is_discarded() && !tc.value("arch", "").empty())
    cs.extra_env.push_back("TORCH_CUDA_ARCH_LIST=" + tc.value("arch", ""));  // one target arch
  cs.extra_env.insert(cs.extra_env.end(), python_env.begin(), python_env.end());
  impl_->pool = std::make_unique<CompilePool>(cs);

  // CUDA inside the sandbox: checked now, so a machine where it cannot work fails with a way
  // forward instead of judge_error for every candidate. CUDA starts under the read-only view
  // (/proc stays writable for it). A runtime that refuses the device nodes bound into the private
  // /dev (gVisor refuses device opens for writing under a read-only mount) gets /dev as it is
  // instead, only when the executors run as a sandbox uid other than 0 (which cannot create files
  // there). The probe also leaves files as one slot and looks for them as the next.
  SandboxConfig exec_sandbox = cfg_.sandbox;
  if (impl_->cuda && cfg_.sandbox.enabled) {
    JudgeConfig c = cfg_;
    c.sandbox.uid_base = impl_->uid_base >= 0 ? impl_->uid_base : -2;
    auto p = probe_sandbox(c, true, "as configured");
    if (!p.ok && c.sandbox.private_dev && impl_->uid_base > 0) {
      c.sandbox.private_dev = false;
      auto q = probe_sandbox(c, true, "sandbox.private_dev=false");
      if (q.ok) {
        log::warn("judge: CUDA does not start with the private /dev here (", p.detail,
                  "); executors keep /dev as it is (sandbox.private_dev=false), as uid ", impl_->uid_base,
                  "+slot, which cannot create files there");
        exec_sandbox.private_dev = false;
        p = q;
      }
    }
    DICE_REQUIRE(p.ok, "CUDA does not work inside the judge's sandbox on this machine (", p.detail,
                 "). `dice doctor --set device=cuda` shows which protection stops it");
    if (!p.written.empty() || !p.seen.empty() || !p.remount_blocked)
      log::warn("judge: the sandbox does not hold on this machine (`dice doctor --set device=cuda` shows where)");
    log::info("judge: CUDA executors: ", describe_sandbox(exec_sandbox, impl_->uid_base));
  }
  impl_->exchange_root = make_exchange_root(cfg_.exchange_dir, cfg_.executors, exec_sandbox);
  if (!impl_->exchange_root.empty()) {
    impl_->exchange_guard = std::make_unique<cleanup::ScratchGuard>(impl_->exchange_root);
    if (impl_->uid_base >= 0 && !readable_by_others(impl_->exchange_root)) {
      log::warn("judge: ", impl_->exchange_root, " is not reachable by other users; tensor files go under ",
                cfg_.scratch_root, " instead");
      remove_tree(impl_->exchange_root);
      impl_->exchange_guard.reset();
      impl_->exchange_root.clear();
    }
  }
  // Slots on one GPU take turns for timed calls (a timed call never overlaps other GPU work).
  auto gate = impl_->cuda && cfg_.executors > 1 ? std::make_shared<GpuGate>() : nullptr;
  for (int i = 0; i < cfg_.executors; ++i) {
    ExecutorSettings es;
    es.gpu_gate = gate;
    es.python = cfg_.python;
    es.harness_dir = cfg_.harness_dir;
    es.scratch_root = cfg_.scratch_root;
    es.exchange_root = impl_->exchange_root;
    es.cache_root = cfg_.cache_root;
    es.cuda = impl_->cuda;
    es.spares = cfg_.spares;
    es.always_cupti = cfg_.kernel_record == "cupti";
    es.plausible_speedup = cfg_.plausible_speedup;
    es.sandbox = exec_sandbox;
    es.phases = impl_->phases;
    es.extra_env = python_env;
    es.uid = impl_->uid_base >= 0 ? impl_->uid_base + i : -1;
    impl_->executors.push_back(std::make_unique<Executor>(es, i));
  }

  // Which protections does this machine grant? (One cheap sandboxed probe.)
  if (cfg_.sandbox.enabled) {
    Scratch s(cfg_.scratch_root + "/probe", impl_->uid_base);
    auto o = sandboxed_python(cfg_.sandbox, "/bin/sh", {"-c", "true"}, s.path(), {}, impl_->uid_base, false, {});
    o.pipe_stdin = false;
    auto r = proc::run(o, 30);
    missing_ = r.protections_missing;
    if (!missing_.empty()) {
      std::string m;
      for (auto& x : missing_) m += " " + x;
      log::warn("judge: sandbox protections not available here:", m);
    }
  }
  if (cfg_.reuse_verdicts != "off") {
    JudgeConfig id = cfg_;  // the settings that decide a verdict: not places, worker counts or the reward
    id.python = id.harness_dir = id.scratch_root = id.cache_root = id.pch_root = id.exchange_dir = "";
    id.bytecode_cache = id.reward = id.reuse_verdicts = "";
    id.compile_workers = id.executors = id.spares = id.max_jobs = 0;
    id.tau = 0;
    nlohmann::json identity = {{"memo", 1}, {"settings", config::dump(config::to_yaml(id))},
                               {"toolchain", toolchain_}, {"cuda", impl_->cuda}, {"unsandboxed", impl_->unsandboxed},
                               {"missing", missing_}, {"harness", harness_digest(cfg_.harness_dir)},
                               {"program", program_identity()}};
    // Across runs only correctness (timing changes with the machine and its load), and only where the
    // cache outlives this judge.
    const bool across_runs = cfg_.reuse_verdicts == "cache" && !cfg_.timing && !private_cache;
    impl_->memo = std::make_unique<VerdictMemo>(identity.dump(), across_runs ? cfg_.cache_root + "/verdicts" : "");
  }
}

Judge::~Judge() {
  impl_->pool.reset();
  impl_->executors.clear();
  if (!impl_->exchange_root.empty()) remove_tree(impl_->exchange_root);
  if (!impl_->owned_scratch.empty()) remove_tree(impl_->owned_scratch);
}

std::string Judge::wait_for_pch() { return impl_->pool->wait_for_pch(); }
std::map<std::string, PhaseTotals::Total> Judge::phases() const { return impl_->phases->snapshot(); }
int Judge::fast_builds() const { return impl_->pool->fast_builds(); }
int Judge::build_fallbacks() const { return impl_->pool->fallbacks(); }
int Judge::plain_builds() const { return impl_->pool->plain_builds(); }

int Judge::executor_restarts() const {
  int n = 0;
  for (auto& e : impl_->executors) n += e->restarts();
  return n;
}

std::vector<Verdict> Judge::judge(const std::vector<Job>& jobs, const ProgressFn& progress,
                                  const VerdictFn& on_verdict) {
  const size_t n = jobs.size();
  std::vector<Verdict> verdicts(n);
  std::vector<nlohmann::json> requests(n);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> ready;
  size_t done = 0, pending_compiles = 0;
  // Jobs with the same code for the same task (an RL group often samples one answer many times) are
  // judged once: the later ones get the first one's verdict when it is final.
  std::map<std::pair<std::string, std::string>, size_t> first_with;  // (task id, code file) -> job
  std::vector<std::vector<size_t>> copies(n);
  std::vector<std::string> memo_keys(n);  // judge.reuse_verdicts: where a job's verdict is kept

  auto report = [&](size_t i) {  // caller holds mu
    ++done;
    // After a signal began our own shutdown, what ends is cut short, not judged: nothing is reported.
    if (!cleanup::shutting_down()) {
      if (on_verdict) on_verdict(i, verdicts[i]);
      if (progress) progress(done, n);
    }
  };
  auto finish = [&](size_t i) {  // caller holds mu
    if (verdicts[i].failure == Failure::kJudgeError)  // the judge's own failure, not the candidate's: say why
      log::warn("judge: judge_error on task ", jobs[i].task->id, ": ", proc::tail(verdicts[i].log_tail, 400));
    auto& flags = verdicts[i].flags;
    if (impl_->unsandboxed && std::find(flags.begin(), flags.end(), "unsandboxed") == flags.end())
      flags.push_back("unsandboxed");  // judge.sandbox.allow_unsandboxed
    if (!memo_keys[i].empty() && !cleanup::shutting_down()) impl_->memo->put(memo_keys[i], verdicts[i]);
    report(i);
    for (size_t c : copies[i]) {
      verdicts[c] = verdicts[i];
      verdicts[c].same_as = static_cast<int>(i);
      verdicts[c].compile_s = verdicts[c].exec_s = 0;
      verdicts[c].cache_hit = verdicts[c].compiled;  // its build is the first one's
      report(c);
    }
    cv.notify_all();
  };

  // 1. extraction, static checks, request and seeds (deterministic order), compile submission
  std::vector<std::pair<size_t, std::string>> to_compile;
  for (size_t i = 0; i < n; ++i) {
    const Job& job = jobs[i];
    Verdict& v = verdicts[i];
    DICE_REQUIRE(job.task != nullptr, "judge: job ", i, " has no task");
    v.task_id = job.task->id;
    std::string code = job.is_code ? job.text : extract_candidate_code(job.text);
    v.extracted = !code.empty();
    if (code.empty()) {
      v.failure = Failure::kNoCode;
      v.log_tail = "no code block with ModelNew found in the response";
      finish(i);
      continue;
    }
    if ((job.task->device == "cuda") != impl_->cuda) {
      v.failure = Failure::kJudgeError;
      v.log_tail = str("task ", job.task->id, " runs on ", job.task->device, " but this judge serves ",
                       impl_->cuda ? "cuda" : "cpu");
      finish(i);
      continue;
    }
    if (static_checker_ && cfg_.static_check != "off") {
      v.findings = static_checker_(*job.task, code);
      bool reject = false;
      for (auto& f : v.findings) {
        if (cfg_.static_check == "warn") f.severity = "warn";
        reject = reject || f.severity == "reject";
      }
      if (reject) {
        v.failure = Failure::kStaticReject;
        for (auto& f : v.findings)
          if (f.severity == "reject") v.log_tail += f.check + ": " + f.detail + "\n";
        finish(i);
        continue;
      }
    }
    nlohmann::json req;
    req["task_id"] = job.task->id;
    req["reference"] = store_file(impl_->files_dir, job.task->reference);
    req["candidate"] = store_file(impl_->files_dir, code);
    req["cache_root"] = cfg_.cache_root;
    req["device"] = impl_->cuda ? "cuda" : "cpu";
    req["init_seed"] = impl_->rng() >> 33;
    // Hidden seeds, one per call: no call repeats another's inputs, so no answer can be cached.
    auto draw = [&](int n) {
      std::vector<uint64_t> v;
      for (int t = 0; t < n; ++t) v.push_back(impl_->rng() >> 33);
      return v;
    };
    req["seeds"] = draw(cfg_.trials);
    req["warmup_seeds"] = draw(cfg_.timing ? cfg_.warmup : 0);
    req["timing_seeds"] = draw(cfg_.timing ? cfg_.iters : 0);
    req["remeasure_seeds"] = draw(cfg_.timing ? cfg_.warmup + cfg_.iters : 0);
    req["atol"] = cfg_.atol >= 0 ? nlohmann::json(cfg_.atol) : nlohmann::json(nullptr);
    req["rtol"] = cfg_.rtol >= 0 ? nlohmann::json(cfg_.rtol) : nlohmann::json(nullptr);
    req["record_ops"] = cfg_.own_kernel != "off" || cfg_.library_ops != "off";
    auto key = std::make_pair(job.task->id, req["candidate"].get<std::string>());
    requests[i] = std::move(req);
    if (impl_->memo) {  // judged before (an earlier batch or run): that verdict, not built or run again
      const std::string mk = impl_->memo->key(*job.task, code);
      if (auto kept = impl_->memo->find(mk, job.task->id)) {
        v = *kept;
        v.reused = true;
        v.same_as = -1;
        v.compile_s = v.exec_s = 0;
        v.cache_hit = v.compiled;
        finish(i);
        continue;
      }
      memo_keys[i] = mk;
    }
    auto [it, first] = first_with.emplace(key, i);
    if (first) {
      to_compile.emplace_back(i, code);
    } else {
      copies[it->second].push_back(i);
    }
  }

  // 2. compile (pool threads) -> ready queue -> executors (one thread each)
  {
    std::lock_guard<std::mutex> lk(mu);
    pending_compiles = to_compile.size();
  }
  for (auto& [i, code] : to_compile) {
    size_t idx = i;
    impl_->pool->submit(requests[idx]["candidate"].get<std::string>(), code, [&, idx](const CompileResult& r) {
      std::lock_guard<std::mutex> lk(mu);
      Verdict& v = verdicts[idx];
      v.compile_s = r.seconds;
      v.cache_hit = r.cache_hit;
      requests[idx]["extensions"] = r.extensions;  // the executor loads exactly these builds
      --pending_compiles;
      if (r.failure != Failure::kNone) {
        v.failure = r.failure;
        v.log_tail = r.log_tail;
        finish(idx);
      } else {
        ready.push_back(idx);
        cv.notify_all();
      }
    });
  }

  std::vector<std::thread> runners;
  for (auto& ex : impl_->executors) {
    Executor* e = ex.get();
    runners.emplace_back([&, e] {
      for (;;) {
        size_t idx;
        int ahead = 0;  // this slot's share of what is still to be evaluated (built or building)
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return !ready.empty() || pending_compiles == 0; });
          if (ready.empty()) return;
          idx = ready.front();
          ready.pop_front();
          const size_t slots = impl_->executors.size();
          ahead = static_cast<int>((ready.size() + pending_compiles + slots - 1) / slots);
        }
        ExecOutcome o;
        try {
          o = e->run(requests[idx], cfg_.exec_timeout_s, ahead);
        } catch (const std::exception& ex) {
          o.failure = Failure::kJudgeError;
          o.log_tail = ex.what();
        }
        std::lock_guard<std::mutex> lk(mu);
        Verdict& v = verdicts[idx];
        v.compiled = true;
        v.exec_s = o.seconds;
        v.failure = o.failure;
        v.correct = o.failure == Failure::kNone;
        if (!v.correct) v.log_tail = o.log_tail;
        if (o.reply.is_object()) {
          v.max_abs_error = o.reply.value("max_abs_error", -1.0);
          v.runtime_ms = o.reply.value("runtime_ms", -1.0);
          v.ref_runtime_ms = o.reply.value("ref_runtime_ms", -1.0);
          if (v.correct) {
            v.speedup = o.reply.value("speedup", -1.0);
            v.speedup_host = o.reply.value("speedup_host", -1.0);
          }
          v.flags = o.reply.value("flags", std::vector<std::string>{});
          if (v.correct && o.reply.contains("evidence")) apply_kernel_rules(cfg_, *jobs[idx].task, impl_->cuda, o.reply["evidence"], v);
        }
        finish(idx);
      }
    });
  }
  for (auto& t : runners) t.join();
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == n; });
  }
  if (cleanup::shutting_down()) cleanup::park();  // the handler ends the process: return nothing
  return verdicts;
}

}  // namespace dice::judge
