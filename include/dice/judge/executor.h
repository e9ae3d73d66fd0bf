#pragma once
// Executor (DESIGN §5): a disposable sandboxed Python process (src/judge/python/executor.py) that
// checks candidates against references and times them. Serves many requests; replaced after
// `max_tasks` requests, after any request that asks for recycling (CUDA error, tampering), and
// after a timeout or crash.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dice/judge/sandbox.h"
#include "dice/judge/verdict.h"
#include "dice/util/subprocess.h"

namespace dice::judge {

struct ExecutorSettings {
  std::string python;
  std::string harness_dir;
  std::string scratch_root;
  std::string cache_root;
  bool cuda = false;
  int max_tasks = 32;
  double start_timeout_s = 120;  // interpreter + torch import
  SandboxConfig sandbox;
  int uid = -1;
};

struct ExecOutcome {
  Failure failure = Failure::kNone;
  nlohmann::json reply;  // the executor's answer (empty when it died or timed out)
  std::string log_tail;
  double seconds = 0;
};

class Executor {
 public:
  Executor(ExecutorSettings s, int slot);
  // Sends one request and waits for its answer; a timeout or death becomes the failure class.
  ExecOutcome run(nlohmann::json request, double timeout_s);
  int restarts() const { return restarts_; }

 private:
  void start();
  void stop();

  ExecutorSettings s_;
  int slot_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<proc::Subprocess> proc_;
  int served_ = 0;
  int restarts_ = 0;
  unsigned long nonce_ = 0;
};

}  // namespace dice::judge
