// Compile pool: parallel sandboxed builds into the content-addressed cache, deduplicated by key.
#include "dice/judge/compile_pool.h"

#include <signal.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::judge {

namespace {
std::string tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }
}  // namespace

CompilePool::CompilePool(CompileSettings s) : s_(std::move(s)) {
  DICE_REQUIRE(s_.workers >= 1, "judge.compile_workers must be at least 1, got ", s_.workers);
  pch_done_ = !(s_.light_headers && s_.precompiled_header);  // else started by the first submit()
  if (proc::cpus_allowed() < proc::cpus_online())
    log::info("judge: this process is pinned to ", proc::cpus_allowed(), " of ", proc::cpus_online(),
              " CPUs (mpirun/srun binding); builds run on all CPUs the machine allows");
  for (int i = 0; i < s_.workers; ++i) threads_.emplace_back([this, i] { worker(i); });
}

CompilePool::~CompilePool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  pch_cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (pch_thread_.joinable()) pch_thread_.join();  // a PCH build still running is left to finish (stop_)
}

void CompilePool::build_pch() {
  Timer t;
  std::string dir, error;
  try {
    Scratch scratch(str(s_.scratch_root, "/pch_build"), -1);
    const std::string result = scratch.path() + "/result.json";
    SandboxConfig trusted = s_.sandbox;
    trusted.enabled = false;  // compiles only the judge's own header, and writes ~700 MB
    std::vector<std::string> args = {s_.harness_dir + "/ext.py", "make-pch", s_.cache_root, s_.toolchain,
                                     "--result", result};
    if (s_.cuda) args.push_back("--cuda");
    std::vector<std::string> env = {str("MAX_JOBS=", s_.max_jobs)};
    for (const auto& e : s_.extra_env) env.push_back(e);
    auto opts = sandboxed_python(trusted, s_.python, args, scratch.path(), {}, -1, s_.cuda, env);
    opts.pipe_stdin = false;
    opts.result_pipe = false;
    opts.all_cpus = true;
    proc::Subprocess p(opts);
    bool stopped = false;
    while (p.running()) {  // polled: a judge that is done does not wait for it
      std::unique_lock<std::mutex> lk(mu_);
      if (pch_cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stop_; })) {
        stopped = true;
        break;
      }
    }
    if (stopped) {
      // It finishes on its own (a minute at most) under its lock, so the next judge on this cache
      // finds the PCH instead of starting over.
      p.detach();
      error = "stopped";
    } else {
      auto st = p.wait(5);
      auto j = fs::exists(result) ? nlohmann::json::parse(fs::read_file(result), nullptr, false) : nlohmann::json();
      if (j.is_object()) {
        dir = j.value("pch", "");
        error = j.value("error", "");
      } else {
        error = str("make-pch ", st.describe());
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!dir.empty()) log::debug("judge: precompiled header ready after ", t.elapsed_s(), " s: ", dir);
  else if (error != "stopped")
    log::warn("judge: no precompiled header (builds parse the torch headers): ",
              error.empty() ? "g++ did not accept it" : error);
  std::lock_guard<std::mutex> lk(mu_);
  pch_dir_ = dir;
  pch_done_ = true;
  pch_cv_.notify_all();
}

CompileResult CompilePool::compile(const std::string& candidate_path, const std::string& code) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  CompileResult res;
  submit(candidate_path, code, [&](const CompileResult& r) {
    std::lock_guard<std::mutex> lk(mu);
    res = r;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done; });
  return res;
}

std::string CompilePool::wait_for_pch() {
  std::unique_lock<std::mutex> lk(mu_);
  if (!pch_done_ && !pch_thread_.joinable()) pch_thread_ = std::thread([this] { build_pch(); });
  pch_cv_.wait(lk, [&] { return pch_done_; });
  return pch_dir_;
}

std::string CompilePool::job_key(const std::string& code) const {
  hash::Sha256 h;
  h.update(code);
  h.update("\x1f");
  h.update(s_.toolchain);
  for (const auto& f : s_.extra_cflags) h.update("\x1e" + f);
  for (const auto& f : s_.extra_cuda_cflags) h.update("\x1d" + f);
  return h.hex_digest();
}

void CompilePool::submit(const std::string& candidate_path, const std::string& code,
                         std::function<void(const CompileResult&)> done) {
  std::string key = job_key(code);
  CompileResult ready;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pch_done_ && !pch_thread_.joinable()) pch_thread_ = std::thread([this] { build_pch(); });
    auto it = jobs_.find(key);
    if (it == jobs_.end()) {
      auto job = std::make_shared<Job>();
      job->path = candidate_path;
      job->waiters.push_back(std::move(done));
      jobs_[key] = job;
      queue_.push_back(key);
      cv_.notify_one();
      return;
    }
    if (!it->second->finished) {
      it->second->waiters.push_back(std::move(done));
      return;
    }
    ready = it->second->result;
  }
  ready.cache_hit = true;  // the same candidate was built before
  ready.builds = 0;
  ready.seconds = 0;
  done(ready);
}

void CompilePool::worker(int index) {
  for (;;) {
    std::string key;
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      key = queue_.front();
      queue_.pop_front();
      job = jobs_[key];
    }
    CompileResult r;
    try {
      r = compile_one(job->path, index);
    } catch (const std::exception& e) {
      r.failure = Failure::kJudgeError;
      r.log_tail = e.what();
    }
    std::vector<std::function<void(const CompileResult&)>> waiters;
    {
      std::lock_guard<std::mutex> lk(mu_);
      job->finished = true;
      job->result = r;
      waiters.swap(job->waiters);
    }
    for (size_t i = 0; i < waiters.size(); ++i) {
      CompileResult ri = r;
      if (i > 0) {  // shared the first waiter's build
        ri.cache_hit = true;
        ri.builds = 0;
      }
      waiters[i](ri);
    }
    if (r.failure == Failure::kJudgeError) {  // infrastructure failure: allow a retry later
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.erase(key);
    }
  }
}

CompileResult CompilePool::compile_one(const std::string& path, int index) {
  Timer t;
  int uid = s_.uid_base >= 0 ? s_.uid_base + s_.slot_offset + index : -1;
  Scratch scratch(str(s_.scratch_root, "/compile", index), uid);
  std::vector<std::string> env = {str("MAX_JOBS=", s_.max_jobs)};
  for (const auto& e : s_.extra_env) env.push_back(e);
  auto opts = sandboxed_python(s_.sandbox, s_.python, {s_.harness_dir + "/compile.py"}, scratch.path(),
                               {s_.cache_root}, uid, s_.cuda, env);
  opts.sandbox.cpu_s = static_cast<long>(s_.timeout_s * 4) + 60;
  opts.all_cpus = true;  // builds use the whole node even when mpirun pinned this rank to one core
  nlohmann::json req = {{"candidate", path},
                        {"cache_root", s_.cache_root},
                        {"toolchain", s_.toolchain},
                        {"light_headers", s_.light_headers},
                        {"extra_cflags", s_.extra_cflags},
                        {"extra_cuda_cflags", s_.extra_cuda_cflags}};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pch_dir_.empty()) req["pch"] = {{s_.cuda ? "cuda" : "cpp", pch_dir_}};
  }
  CompileResult r;
  proc::Subprocess p(opts);
  p.write_stdin(req.dump() + "\n");
  p.close_stdin();
  double deadline = now_s() + s_.timeout_s;
  bool building = false;
  nlohmann::json status;
  std::string line;
  while (status.is_null()) {
    double left = deadline - now_s();
    if (left <= 0 || !p.read_result_line(line, left)) break;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.value("event", "") == "building") building = true;
    else if (j.contains("status")) status = j;
  }
  auto st = p.wait(std::max(1.0, deadline - now_s()));
  if (!status.is_null()) {
    std::string s = status.value("status", "load_error");
    r.failure = s == "ok" ? Failure::kNone : failure_from_name(s);
    r.log_tail = status.value("log", "");
    r.cache_hit = true;
    for (const auto& c : status.value("calls", nlohmann::json::array())) {
      r.keys.push_back(c.value("key", ""));
      if (!c.value("cache_hit", true)) {
        r.cache_hit = false;
        ++r.builds;
      }
    }
  } else if (st.timed_out || now_s() >= deadline) {
    r.failure = building ? Failure::kCompileTimeout : Failure::kTimeout;
    r.log_tail = str(building ? "build" : "candidate module code", " exceeded ", s_.timeout_s, " s");
  } else if (st.signal == SIGXCPU || st.signal == SIGXFSZ) {
    r.failure = Failure::kResourceLimit;
    r.log_tail = "compile step: " + st.describe();
  } else {
    r.failure = Failure::kCrash;
    r.log_tail = "compile step died: " + st.describe();
  }
  std::string err = tail(p.stderr_tail(), 1500);
  if (r.failure != Failure::kNone && !err.empty()) r.log_tail = tail(r.log_tail, 2500) + "\n[stderr]\n" + err;
  r.seconds = t.elapsed_s();
  return r;
}

}  // namespace dice::judge
