// Compile pool: parallel sandboxed builds into the content-addressed cache, deduplicated by key.
#include "dice/judge/compile_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::judge {

namespace {
// The normalised load_inline arguments (ext.normalize) with every field checked and nothing else
// kept: the bytes the key is computed from and the builder is given. Throws dice::Error when the
// request is not of that shape.
nlohmann::json canonical_request(const nlohmann::json& r) {
  DICE_REQUIRE(r.is_object(), "the build request is not an object");
  auto strings = [&](const char* k) {
    nlohmann::json out = nlohmann::json::array();
    if (!r.contains(k)) return out;
    DICE_REQUIRE(r[k].is_array(), "build request field ", k, " is not a list");
    for (const auto& x : r[k]) {
      DICE_REQUIRE(x.is_string(), "build request field ", k, " holds a non-string");
      out.push_back(x);
    }
    return out;
  };
  nlohmann::json c;
  for (const char* k : {"cpp_sources", "cuda_sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                        "extra_include_paths"})
    c[k] = strings(k);
  c["functions"] = nullptr;
  if (r.contains("functions") && !r["functions"].is_null()) {
    DICE_REQUIRE(r["functions"].is_object(), "build request field functions is not a mapping");
    for (const auto& [name, doc] : r["functions"].items()) {
      DICE_REQUIRE(doc.is_string(), "build request: the docstring of ", name, " is not a string");
      c["functions"][name] = doc;
    }
  }
  c["with_cuda"] = nullptr;
  if (r.contains("with_cuda") && !r["with_cuda"].is_null()) {
    DICE_REQUIRE(r["with_cuda"].is_boolean(), "build request field with_cuda is not a boolean");
    c["with_cuda"] = r["with_cuda"];
  }
  c["with_pytorch_error_handling"] = r.value("with_pytorch_error_handling", true);
  return c;
}

// <cache_root>/<key> made by this process (ours, not writable by others, a real directory).
bool trusted_entry(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)))
    return false;
  struct stat m;
  std::string meta = dir + "/meta.json";
  return lstat(meta.c_str(), &m) == 0 && S_ISREG(m.st_mode) && m.st_uid == geteuid();
}


// Kept only when the compiler rejected the sources: a diagnostic, and no sign of a machine limit.
bool compiler_rejected(const std::string& text) {
  return text.find("error:") != std::string::npos && !shows_machine_limit(text);
}

void keep_error(const std::string& file, const std::string& text, int index) {
  if (!compiler_rejected(text)) return;
  const std::string tmp = str(file, ".tmp.", getpid(), ".", index);
  try {
    ::unlink(tmp.c_str());
    fs::write_file(tmp, text.substr(0, 1 << 20));
    chmod(tmp.c_str(), 0644);
    if (::rename(tmp.c_str(), file.c_str()) != 0) ::unlink(tmp.c_str());
  } catch (const Error& e) {
    ::unlink(tmp.c_str());
    log::debug("judge: compile error not kept in the cache: ", e.what());
  }
}

// Copies a regular file (never through a symlink) into dst, mode 0644.
void copy_regular_file(const std::string& src, const std::string& dst) {
  int in = ::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  DICE_REQUIRE(in >= 0, "cannot open the built extension '", src, "': ", std::strerror(errno));
  struct stat st;
  if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (4LL << 30)) {
    ::close(in);
    throw Error(str("the builder's output '", src, "' is not a regular file of at most 4 GiB"));
  }
  int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    ::close(in);
    throw Error(str("cannot create '", dst, "': ", std::strerror(errno)));
  }
  char buf[1 << 16];
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(out, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      off += w;
    }
    if (!ok) break;
  }
  ::close(in);
  ok = ::close(out) == 0 && ok;
  DICE_REQUIRE(ok, "cannot copy '", src, "' into the build cache: ", std::strerror(errno));
}
// Why a step that gave no result ended: past its deadline, a resource limit, or anything else.
Failure ended_without_result(const proc::ExitStatus& st, bool past_deadline, Failure on_timeout, Failure otherwise) {
  if (st.timed_out || past_deadline) return on_timeout;
  if (st.signal == SIGXCPU || st.signal == SIGXFSZ) return Failure::kResourceLimit;
  return otherwise;
}
}  // namespace

proc::SpawnOptions CompilePool::python_options(const SandboxConfig& sandbox, const std::vector<std::string>& args,
                                               const std::string& scratch, int uid) const {
  std::vector<std::string> env = {str("MAX_JOBS=", s_.max_jobs)};
  for (const auto& e : s_.extra_env) env.push_back(e);
  auto opts = sandboxed_python(sandbox, s_.python, args, scratch, {}, uid, s_.cuda, env);
  opts.sandbox.cpu_s = static_cast<long>(s_.timeout_s * 4) + 60;
  opts.all_cpus = true;  // builds use the whole node even when mpirun pinned this rank to one core
  return opts;
}

std::string source_for_key(const std::string& src) {
  if (src.find("R\"") != std::string::npos || src.find("??") != std::string::npos) return src;
  // In `#include <...>` a "//" or "/*" is part of the header's name, not a comment.
  for (size_t at = src.find("include"); at != std::string::npos; at = src.find("include", at + 7)) {
    const size_t bol = src.rfind('\n', at) == std::string::npos ? 0 : src.rfind('\n', at) + 1;
    const size_t eol = std::min(src.find('\n', at), src.size());
    const std::string line = src.substr(bol, eol - bol);
    if (line.find('#') != std::string::npos && line.find('<') != std::string::npos &&
        (line.find("//") != std::string::npos || line.find("/*") != std::string::npos))
      return src;
  }
  std::string out;
  out.reserve(src.size());
  const size_t n = src.size();
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  bool pending = false;  // a run of blanks and comments: one space between tokens, none at a line's ends
  auto space = [&] { pending = true; };
  auto emit = [&](char c) {
    if (pending && c != '\n' && !out.empty() && out.back() != '\n') out.push_back(' ');
    pending = false;
    out.push_back(c);
  };
  for (size_t i = 0; i < n;) {
    const char c = src[i];
    if (blank(c)) {
      if (i > 0 && src[i - 1] == '\\') {  // "\ " then a newline: a continuation to some compilers only
        size_t j = i;
        while (j < n && blank(src[j])) ++j;
        if (j < n && src[j] == '\n') return src;
      }
      space();
      ++i;
    } else if (c == '/' && i + 1 < n && src[i + 1] == '/') {  // to the end of the line; a \-newline continues it
      size_t j = i + 2;
      std::string newlines;
      while (j < n && src[j] != '\n') {
        if (src[j] == '\\' && j + 1 < n && src[j + 1] == '\n') {
          newlines.push_back('\n');
          j += 2;
          continue;
        }
        ++j;
      }
      space();
      for (char nl : newlines) emit(nl);
      i = j;
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      const size_t end = src.find("*/", i + 2);
      if (end == std::string::npos) return src;
      space();
      for (size_t j = i + 2; j < end; ++j)
        if (src[j] == '\n') emit('\n');
      space();
      i = end + 2;
    } else if (c == '"' || c == '\'') {
      // glued to a name or number: a prefixed literal (L"", u8''), a digit separator (1'000)
      if (i > 0 && (std::isalnum(static_cast<unsigned char>(src[i - 1])) || src[i - 1] == '_')) return src;
      size_t j = i + 1;
      while (j < n && src[j] != c && src[j] != '\n') j += src[j] == '\\' ? 2 : 1;
      if (j >= n || src[j] != c) return src;  // open literal
      emit(src[i]);
      out.append(src, i + 1, j - i);
      i = j + 1;
    } else {
      emit(c);
      ++i;
    }
  }
  return out;
}

namespace {
std::string key_of_canonical(const CompileSettings& s, const nlohmann::json& canonical) {
  nlohmann::json keyed = canonical;
  for (const char* k : {"cpp_sources", "cuda_sources"})
    for (auto& src : keyed[k]) src = source_for_key(src.get<std::string>());
  hash::Sha256 h;
  h.update("dice-ext-3\x1f");
  h.update(s.toolchain);
  for (const auto& f : s.extra_cflags) h.update("\x1e" + f);
  for (const auto& f : s.extra_cuda_cflags) h.update("\x1d" + f);
  if (s.light_cuda) h.update("\x1clight_cuda");  // its builds may come from other .cu text
  h.update("\x1f");
  h.update(keyed.dump());
  return h.hex_digest();
}
}  // namespace

std::string extension_key(const CompileSettings& s, const nlohmann::json& request) {
  return key_of_canonical(s, canonical_request(request));
}

bool read_kept_file(const std::string& file, std::string& text) {
  int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  const bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                    !(st.st_mode & (S_IWGRP | S_IWOTH)) && st.st_size <= (1 << 20);
  if (ours) {  // from the descriptor that was checked, not from the path again
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    for (ssize_t n; got < text.size() && (n = ::read(fd, text.data() + got, text.size() - got)) > 0;)
      got += static_cast<size_t>(n);
    text.resize(got);
  }
  ::close(fd);
  return ours;
}

bool shows_machine_limit(const std::string& text) {
  for (const char* limit : {"internal compiler error", "Killed", "signal", "virtual memory exhausted",
                            "Cannot allocate memory", "out of memory", "Resource temporarily unavailable",
                            "No space left on device", "Too many open files", "Disk quota"})
    if (text.find(limit) != std::string::npos) return true;
  return false;
}

CompilePool::CompilePool(CompileSettings s) : s_(std::move(s)) {
  DICE_REQUIRE(s_.workers >= 1, "judge.compile_workers must be at least 1, got ", s_.workers);
  pch_done_ = !s_.precompiled_header;  // else started by the first submit()
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
  build_cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (pch_thread_.joinable()) {
    bool running;
    {
      std::lock_guard<std::mutex> lk(mu_);
      running = !pch_done_;
    }
    if (running) log::info("judge: waiting for the precompiled header build to finish (once per toolchain and cache)");
    pch_thread_.join();
  }
}

void CompilePool::build_pch() {
  Timer t;
  std::string dir, error;
  try {
    Scratch scratch(str(s_.scratch_root, "/pch_build"), -1);
    const std::string result = scratch.path() + "/result.json";
    SandboxConfig trusted = s_.sandbox;
    trusted.enabled = false;  // compiles only the judge's own header, and writes ~700 MB
    const std::string& root = s_.pch_root.empty() ? s_.cache_root : s_.pch_root;
    std::vector<std::string> args = {s_.harness_dir + "/ext.py", "make-pch", root, s_.toolchain,
                                     "--result", result};
    if (s_.cuda) args.push_back("--cuda");
    auto opts = python_options(trusted, args, scratch.path(), -1);
    opts.pipe_stdin = false;
    opts.result_pipe = false;
    proc::Subprocess p(opts);
    // Waited for even when the judge is done (its destructor joins this thread): no process of
    // the judge outlives the command. A signal's handler kills it instead; the next judge on this
    // cache then starts it over (ext.py records the PCH only once it is whole).
    auto st = p.wait(24 * 3600.0);
    auto j = fs::exists(result) ? nlohmann::json::parse(fs::read_file(result), nullptr, false) : nlohmann::json();
    if (j.is_object()) {
      dir = j.value("pch", "");
      error = j.value("error", "");
    } else {
      error = str("make-pch ", st.describe());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!dir.empty()) log::debug("judge: precompiled header ready after ", t.elapsed_s(), " s: ", dir);
  else
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

void CompilePool::start_pch_locked() {
  if (!pch_done_ && !pch_thread_.joinable()) {
    log::info("judge: building the precompiled headers and the fast builder's recipe (once per toolchain under ",
              s_.pch_root.empty() ? s_.cache_root : s_.pch_root, "); ",
              s_.fast_build ? "builds start when they are ready" : "builds meanwhile parse the headers");
    pch_thread_ = std::thread([this] { build_pch(); });
  }
}

std::string CompilePool::wait_for_pch() {
  std::unique_lock<std::mutex> lk(mu_);
  start_pch_locked();
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
    start_pch_locked();
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
      // The fast builder needs the PCH directory's recipe: wait for it before the candidate's clock
      // starts (the PCH is the judge's own one-off work, never a candidate's compile time).
      if (s_.fast_build && s_.precompiled_header) wait_for_pch();
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
  // The cache is not writable here: this process runs the candidate's module code.
  auto opts = python_options(s_.sandbox, {s_.harness_dir + "/compile.py"}, scratch.path(), uid);
  CompileResult r;
  proc::Subprocess p(opts);
  p.write_stdin(
      nlohmann::json{{"candidate", path}, {"cache_root", s_.cache_root}, {"stand_in", s_.stand_in_torch}}.dump() + "\n");
  // One limit for the candidate's module code and every build it asks for together.
  const double deadline = now_s() + s_.timeout_s;
  double build_wait_s = 0;  // this job's share of `t`: waiting for builds; the rest is the compile step's
  int requests = 0;  // r.failure is set only by a failed build until the compile step ends
  nlohmann::json status;
  std::string line;
  while (status.is_null()) {
    double left = deadline - now_s();
    if (left <= 0 || !p.read_result_line(line, left)) break;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.contains("status")) {
      status = j;
      break;
    }
    if (!j.contains("event") || j["event"] != "build") continue;
    BuildReply b;
    if (++requests > s_.max_extensions) {
      b.failure = Failure::kCompileError;
      b.log = str("more than ", s_.max_extensions, " load_inline calls in one candidate");
    } else {
      Timer bt;
      b = ensure_built(j.contains("request") ? j["request"] : nlohmann::json(), index, deadline);
      build_wait_s += bt.elapsed_s();
    }
    if (b.failure == Failure::kCompileTimeout) {
      r.failure = Failure::kCompileTimeout;
      r.log_tail = b.log;
      break;
    }
    nlohmann::json reply;
    if (b.failure == Failure::kNone) {
      const auto& d = j.contains("digest") && j["digest"].is_string() ? j["digest"].get_ref<const std::string&>() : "";
      r.extensions[d.substr(0, 64)] = b.key;
      r.keys.push_back(b.key);
      if (!b.cache_hit) ++r.builds;
      reply = {{"status", "ok"}, {"key", b.key}, {"cache_hit", b.cache_hit}, {"seconds", b.seconds}};
    } else {
      r.failure = b.failure;
      r.log_tail = b.log;
      reply = {{"status", failure_name(b.failure)}, {"log", proc::tail(b.log, 8000)}};
    }
    p.write_stdin(reply.dump() + "\n");
  }
  p.close_stdin();
  auto st = p.wait(std::max(1.0, deadline - now_s()));
  r.cache_hit = r.builds == 0;
  if (r.failure != Failure::kNone) {
    // a build failed or ran out of time: that is the verdict, whatever the candidate made of it
  } else if (!status.is_null()) {
    std::string s = status.value("status", "load_error");
    r.failure = s == "ok" ? Failure::kNone : failure_from_name(s);
    if (r.failure == Failure::kCompileError) r.failure = Failure::kLoadError;  // no build of ours failed
    r.log_tail = status.value("log", "");
  } else {
    r.failure = ended_without_result(st, now_s() >= deadline, Failure::kTimeout, Failure::kCrash);
    r.log_tail = r.failure == Failure::kTimeout ? str("candidate module code exceeded ", s_.timeout_s, " s")
                                                : "compile step died: " + st.describe();
  }
  std::string err = proc::tail(p.stderr_tail(), 1500);
  if (r.failure != Failure::kNone && !err.empty()) r.log_tail = proc::tail(r.log_tail, 2500) + "\n[stderr]\n" + err;
  r.seconds = t.elapsed_s();
  if (s_.phases) {
    s_.phases->add("compile: builds (waited for)", build_wait_s);
    const bool stand_in = status.is_object() && status.value("torch", "") == "stand-in";
    s_.phases->add(stand_in ? "compile: compile step (candidate module, stand-in torch)"
                            : "compile: compile step (candidate module, import torch)",
                   r.seconds - build_wait_s);
  }
  return r;
}

CompilePool::BuildReply CompilePool::ensure_built(const nlohmann::json& request, int index, double deadline) {
  BuildReply b;
  nlohmann::json req;
  try {
    req = canonical_request(request);
    b.key = key_of_canonical(s_, req);
  } catch (const std::exception& e) {
    b.failure = Failure::kCompileError;
    b.log = str("malformed build request: ", e.what());
    return b;
  }
  std::shared_ptr<Build> build;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto& slot = builds_[b.key];
    if (slot) {  // built, or being built by another worker: wait for it
      build = slot;
      bool ended = build_cv_.wait_until(lk, std::chrono::steady_clock::now() +
                                                std::chrono::milliseconds(static_cast<long>(
                                                    std::max(0.0, deadline - now_s()) * 1000)),
                                        [&] { return build->done || stop_; });
      if (!ended || !build->done) {
        b.failure = Failure::kCompileTimeout;
        b.log = "waited for another candidate's identical build past the time limit";
        return b;
      }
      b.failure = build->failure;
      b.log = build->log;
      return b;  // cache_hit
    }
    slot = build = std::make_shared<Build>();
  }
  BuildReply made;
  try {
    made = build_and_publish(b.key, req, index, deadline);
  } catch (const std::exception& e) {
    made.key = b.key;
    made.failure = Failure::kJudgeError;
    made.log = e.what();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    build->done = true;
    build->failure = made.failure;
    build->log = made.log;
    // A compile error is the sources' fault and stays; a timeout or a judge error may be retried.
    if (made.failure != Failure::kNone && made.failure != Failure::kCompileError) builds_.erase(b.key);
  }
  build_cv_.notify_all();
  return made;
}

CompilePool::BuildReply CompilePool::build_and_publish(const std::string& key, const nlohmann::json& req, int index,
                                                       double deadline) {
  BuildReply b;
  b.key = key;
  const std::string final_dir = str(s_.cache_root, "/", key);
  // Another judge on this cache (a second rank) may be building the same key: one at a time.
  int lock = ::open((final_dir + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  DICE_REQUIRE(lock >= 0, "cannot open the build lock in '", s_.cache_root, "': ", std::strerror(errno));
  struct LockGuard {
    int fd;
    ~LockGuard() { ::close(fd); }
  } guard{lock};
  while (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    if (now_s() >= deadline) {
      b.failure = Failure::kCompileTimeout;
      b.log = "waited for another judge's identical build past the time limit";
      return b;
    }
    usleep(100 * 1000);
  }
  if (trusted_entry(final_dir)) return b;  // cache_hit
  const std::string error_file = final_dir + ".error";
  // <cache_root>/<key>.error: the compiler's answer to sources that did not compile, kept by this
  // process's user (read_kept_file). The same sources with the same toolchain and flags fail the same
  // way, so a later judge on this cache answers from it without compiling.
  if (read_kept_file(error_file, b.log)) {
    b.failure = Failure::kCompileError;
    return b;  // cache_hit: these sources did not compile before
  }
  if (struct stat ls; lstat(final_dir.c_str(), &ls) == 0) {
    log::warn("judge: build cache entry ", final_dir, " was not made by this judge's user; rebuilding it");
    if (S_ISDIR(ls.st_mode)) remove_tree(final_dir);
    else ::unlink(final_dir.c_str());
  }

  Timer t;
  b.cache_hit = false;
  int uid = s_.uid_base >= 0 ? s_.uid_base + s_.slot_offset + s_.workers + index : -1;
  Scratch scratch(str(s_.scratch_root, "/build", index), uid);
  nlohmann::json settings = {{"cache_root", s_.cache_root},
                             {"light_headers", s_.light_headers},
                             {"light_cuda", s_.light_cuda},
                             {"extra_cflags", s_.extra_cflags},
                             {"extra_cuda_cflags", s_.extra_cuda_cflags}};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pch_dir_.empty()) settings["pch"] = {{s_.cuda ? "cuda" : "cpp", pch_dir_}};
  }
  const std::string job = nlohmann::json{{"key", key}, {"request", req}, {"settings", settings}}.dump() + "\n";
  // One builder run: its answer (an object), or why it gave none (failure set in b).
  auto run_builder = [&](const std::vector<std::string>& args) {
    auto opts = python_options(s_.sandbox, args, scratch.path(), uid);
    proc::Subprocess p(opts);
    p.write_stdin(job);
    p.close_stdin();
    std::string line;
    nlohmann::json res;
    if (p.read_result_line(line, std::max(0.1, deadline - now_s()))) res = nlohmann::json::parse(line, nullptr, false);
    auto st = p.wait(std::max(1.0, deadline - now_s()));
    if (!res.is_object()) {
      std::string err = proc::tail(p.stderr_tail(), 1500);
      b.failure = ended_without_result(st, now_s() >= deadline, Failure::kCompileTimeout, Failure::kCompileError);
      b.log = b.failure == Failure::kCompileTimeout ? str("build exceeded ", s_.timeout_s, " s")
                                                    : "the builder died: " + st.describe() + (err.empty() ? "" : "\n[stderr]\n" + err);
    }
    return res;
  };
  nlohmann::json res;
  // The fast builder (fastbuild.py: no torch import, device code without the torch headers) when
  // the PCH directory holds its recipe; "fallback" means: build it as written (ext.py), same verdict.
  if (s_.fast_build && settings.contains("pch")) {
    res = run_builder({s_.harness_dir + "/fastbuild.py"});
    if (res.is_object() && res.value("status", "") == "fallback") {
      log::info("judge: the fast builder handed ", key.substr(0, 12), " to the plain build: ",
                 proc::tail(res.value("log", ""), 300));
      ++fallbacks_;
      res = nlohmann::json();
    } else if (!res.is_object() && b.failure != Failure::kCompileTimeout) {
      b.failure = Failure::kNone;  // the fast builder itself died: the plain one decides
      ++fallbacks_;
    }
  }
  if (!res.is_object() && b.failure == Failure::kNone) res = run_builder({s_.harness_dir + "/ext.py", "build"});
  b.seconds = t.elapsed_s();
  if (!res.is_object()) return b;
  if (res.value("status", "") != "ok") {
    b.failure = Failure::kCompileError;
    b.log = res.contains("log") && res["log"].is_string() ? res["log"].get<std::string>() : "build failed";
    if (res.value("status", "") == "compile_error") keep_error(error_file, b.log, index);
    return b;
  }
  b.fast = res.value("header", "") == "fast";
  ++(b.fast ? fast_builds_ : plain_builds_);
  // The builder ran as a sandbox uid: take only a regular file from inside its scratch directory.
  std::string so = res.value("so", ""), name = res.value("name", "");
  char real_so[PATH_MAX], real_scratch[PATH_MAX];
  DICE_REQUIRE(realpath(so.c_str(), real_so) && realpath(scratch.path().c_str(), real_scratch) &&
                   std::string(real_so).rfind(std::string(real_scratch) + "/", 0) == 0,
               "the builder reported an output outside its scratch directory: ", so);
  DICE_REQUIRE(name.rfind("dice_" + key.substr(0, 20) + "_", 0) == 0 && name.size() <= 64 &&
                   name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
                       std::string::npos,
               "the builder reported an unexpected module name: ", name);
  const std::string tmp = str(final_dir, ".tmp.", getpid(), ".", index);
  remove_tree(tmp);
  DICE_REQUIRE(::mkdir(tmp.c_str(), 0700) == 0, "cannot create '", tmp, "': ", std::strerror(errno));
  copy_regular_file(real_so, tmp + "/" + name + ".so");
  // A fast build without a pybind11 module is called through the judge's own dice_bind_py, made
  // with the precompiled headers (its path comes from the judge's recipe, never from the builder).
  std::string binding;
  if (res.value("binding", false)) {
    std::string pch;
    {
      std::lock_guard<std::mutex> lk(mu_);
      pch = pch_dir_;
    }
    auto recipe = nlohmann::json::parse(fs::read_file(pch + "/recipe.json"), nullptr, false);
    binding = recipe.is_object() ? recipe.value("binding", "") : "";
    struct stat st;
    // ours, or root's (an administrator's shared pch_root, ext.py make-pch): no one else may write it
    const bool ours = lstat(pch.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
                      (st.st_uid == geteuid() || st.st_uid == 0) && !(st.st_mode & (S_IWGRP | S_IWOTH));
    DICE_REQUIRE(!binding.empty() && binding.rfind(pch + "/", 0) == 0 && ours && fs::exists(binding),
                 "the builder made a dice_bind extension, but the judge's recipe has no binding module");
  }
  nlohmann::json meta = {{"key", key}, {"name", name}, {"so", name + ".so"}, {"binding", binding},
                         {"header", res.value("header", "")}, {"build_s", res.value("build_s", 0.0)},
                         {"launch_counter", res.contains("launch_counter") && res["launch_counter"].is_boolean() &&
                                                res["launch_counter"].get<bool>()},
                         {"cached_parts", res.contains("cached_parts") && res["cached_parts"].is_array()
                                              ? res["cached_parts"] : nlohmann::json::array()},
                         {"steps", res.contains("steps") && res["steps"].is_object() ? res["steps"] : nlohmann::json::object()}};
  fs::write_file(tmp + "/meta.json", meta.dump());
  chmod((tmp + "/meta.json").c_str(), 0644);
  chmod(tmp.c_str(), 0755);
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) remove_tree(tmp);  // published meanwhile
  DICE_REQUIRE(trusted_entry(final_dir), "could not publish the build of ", key, " into ", s_.cache_root);
  publish_parts(res, std::filesystem::path(real_so).parent_path().string(), index);
  return b;
}

// The object files a fast build compiled (fastbuild.Parts), for later builds of samples that share a
// part: each into <cache_root>/parts/<key>.o, written here (the builder only reads that directory).
// Only a regular file of the build's own directory, named as the builder names them, under a key of
// 64 hex digits; one already there stays.
void CompilePool::publish_parts(const nlohmann::json& res, const std::string& build_dir, int index) {
  if (!res.contains("parts") || !res["parts"].is_object() || res["parts"].empty()) return;
  const std::string dir = s_.cache_root + "/parts";
  if (::mkdir(dir.c_str(), 0755) == 0)
    chmod(dir.c_str(), 0755);  // whatever the umask: the builders read it
  else if (errno != EEXIST)
    return;
  static const std::set<std::string> kFiles = {"main.part.o", "main_pybind.part.o", "host.part.o",
                                               "host_full.part.o", "device.part.o", "device2.part.o"};
  for (auto& [file, key] : res["parts"].items()) {
    if (!kFiles.count(file) || !key.is_string()) continue;
    const std::string k = key.get<std::string>();
    if (k.size() != 64 || k.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    const std::string dst = dir + "/" + k + ".o";
    if (fs::exists(dst)) continue;
    const std::string tmp = str(dir, "/.tmp.", getpid(), ".", index, ".", file);
    ::unlink(tmp.c_str());
    try {
      copy_regular_file(build_dir + "/" + file, tmp);
    } catch (const Error& e) {
      log::warn("judge: build part ", file, " not kept: ", e.what());
      ::unlink(tmp.c_str());
      continue;
    }
    if (::rename(tmp.c_str(), dst.c_str()) != 0) ::unlink(tmp.c_str());
  }
}

}  // namespace dice::judge
