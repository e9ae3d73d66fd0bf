#pragma once
// The judge's verdict on one candidate (DESIGN §4 "Rollouts / verdicts").
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dice::judge {

// Fixed failure classes; kNone for a correct candidate.
enum class Failure {
  kNone = 0,
  kNoCode,          // no fenced code block / empty response
  kStaticReject,    // a static check configured to reject fired
  kCompileError,
  kCompileTimeout,
  kLoadError,       // module import / ModelNew missing / constructor raised
  kRuntimeError,    // exception while running forward
  kWrongShape,      // shape or dtype mismatch
  kWrongValue,      // allclose failed (or NaN)
  kInputMutated,    // candidate changed its inputs
  kNondeterministic,
  kTimeout,         // wall-clock kill while executing
  kCrash,           // signal / os._exit / segfault in the executor
  kResourceLimit,   // memory / file size / process limit hit
  kSandboxViolation,// tried to write outside scratch, network, etc. (when detected)
  kNoOwnKernel,     // the run-time record shows the work done by library ops, not the candidate's kernel
  kLeftoverProcess, // a thread or child process of the candidate was still alive after forward returned
  kTimingTampered,  // the candidate's clock disagrees with the judge's host clock
  kJudgeError,      // the judge itself failed (infrastructure), not the candidate's fault
};
const char* failure_name(Failure f);
Failure failure_from_name(const std::string& name);  // throws dice::Error on unknown names

struct Finding {
  std::string check;     // e.g. "no_kernel", "torch_op_in_forward", "try_except", "stream", "thread", "monkey_patch"
  std::string severity;  // "warn" or "reject"
  std::string detail;
};

struct Verdict {
  std::string task_id;
  bool extracted = false;   // a code block was found
  std::vector<Finding> findings;
  bool compiled = false;
  bool correct = false;
  double max_abs_error = -1;  // over all trials, -1 if not compared
  double runtime_ms = -1;     // candidate median, -1 if not timed
  double ref_runtime_ms = -1; // reference median on the same inputs (or baseline), -1 if not timed
  double speedup = -1;        // ref_runtime_ms / runtime_ms, -1 if not timed (capped when implausible)
  double speedup_host = -1;   // the same ratio on the judge's host clock (trusted, includes the call protocol)
  std::vector<std::string> flags;  // e.g. "implausible_speedup": above judge.plausible_speedup after a re-measure
  Failure failure = Failure::kNone;
  std::string log_tail;       // last lines of compiler / executor output
  double compile_s = 0;
  double exec_s = 0;
  bool cache_hit = false;     // build reused from the content-hash cache
  int same_as = -1;           // >= 0: the same code for the same task as that earlier job (its index in
                              // the Judge::judge batch, its key in a JudgeQueue), judged once: this is
                              // its verdict (compile_s and exec_s 0)
  bool reused = false;        // the verdict an identical candidate got earlier (judge.reuse_verdicts): not
                              // built or run again (compile_s and exec_s 0)
};

// JSON (one verdict per JSONL line); from_json throws dice::Error naming a bad field.
void to_json(nlohmann::json& j, const Finding& f);
void from_json(const nlohmann::json& j, Finding& f);
void to_json(nlohmann::json& j, const Verdict& v);
void from_json(const nlohmann::json& j, Verdict& v);

}  // namespace dice::judge
