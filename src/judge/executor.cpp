// Executor process management: start, request/answer with a timeout, recycle.
#include "dice/judge/executor.h"

#include <signal.h>

#include <random>

#include "dice/util/error.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::judge {

namespace {
std::string tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }
}  // namespace

Executor::Executor(ExecutorSettings s, int slot) : s_(std::move(s)), slot_(slot) {
  // Unpredictable nonces: a candidate cannot forge an answer for the request it is part of.
  nonce_ = (static_cast<unsigned long>(std::random_device{}()) << 20) & 0xffffffffffffUL;
}

void Executor::start() {
  stop();
  scratch_ = std::make_unique<Scratch>(str(s_.scratch_root, "/exec", slot_), s_.uid);
  auto opts = sandboxed_python(s_.sandbox, s_.python, {s_.harness_dir + "/executor.py"}, scratch_->path(), {},
                               s_.uid, s_.cuda, {});
  proc_ = std::make_unique<proc::Subprocess>(opts);
  std::string line;
  bool ready = proc_->read_result_line(line, s_.start_timeout_s);
  auto j = nlohmann::json::parse(ready ? line : "{}", nullptr, false);
  if (!ready || j.is_discarded() || j.value("event", "") != "ready") {
    std::string err = tail(proc_->stderr_tail(), 2000);
    proc_.reset();
    throw Error(str("the executor (", s_.python, " ", s_.harness_dir, "/executor.py) did not start: ", err));
  }
  served_ = 0;
}

void Executor::stop() {
  if (proc_) ++restarts_;
  proc_.reset();  // kills the process group (and the pid namespace)
  scratch_.reset();
}

ExecOutcome Executor::run(nlohmann::json request, double timeout_s) {
  Timer t;
  ExecOutcome out;
  if (!proc_ || !proc_->running()) start();
  const unsigned long nonce = ++nonce_;
  request["nonce"] = nonce;
  std::string line;
  bool sent = proc_->write_stdin(request.dump() + "\n");
  bool got = sent && proc_->read_result_line(line, timeout_s);
  if (!got) {
    // The result pipe closes before the (pid-namespace) parent is reaped: a read that ended
    // before the deadline means the executor died; one that reached it is a timeout.
    bool timed_out = sent && t.elapsed_s() >= timeout_s;
    auto st = timed_out ? (proc_->kill(), proc::ExitStatus{false, -1, SIGKILL, true}) : proc_->wait(5);
    if (timed_out || st.timed_out) {
      out.failure = Failure::kTimeout;
      out.log_tail = str("evaluation exceeded ", timeout_s, " s");
    } else if (st.signal == SIGXCPU || st.signal == SIGXFSZ) {
      out.failure = Failure::kResourceLimit;
      out.log_tail = "executor " + st.describe();
    } else {
      out.failure = Failure::kCrash;
      out.log_tail = "executor died: " + st.describe();
    }
    out.log_tail += "\n" + tail(proc_->stderr_tail(), 1500);
    stop();
    out.seconds = t.elapsed_s();
    return out;
  }
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("nonce", 0ul) != nonce) {
    // Something other than the harness wrote to the result channel: the candidate did.
    out.failure = Failure::kSandboxViolation;
    out.log_tail = "forged or corrupt executor answer: " + tail(line, 300);
    stop();
    out.seconds = t.elapsed_s();
    return out;
  }
  out.reply = j;
  try {
    out.failure = failure_from_name(j.value("status", "judge_error"));
  } catch (const Error&) {
    out.failure = Failure::kJudgeError;
  }
  out.log_tail = j.value("message", "");
  if (out.failure != Failure::kNone) {
    std::string err = tail(proc_->stderr_tail(), 800);
    if (!err.empty()) out.log_tail += "\n[stderr]\n" + err;
  }
  ++served_;
  if (j.value("recycle", false) || served_ >= s_.max_tasks) stop();
  out.seconds = t.elapsed_s();
  return out;
}

}  // namespace dice::judge
