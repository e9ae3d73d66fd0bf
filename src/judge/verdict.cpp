// Failure names and Verdict <-> JSON.
#include "dice/judge/verdict.h"

#include <nlohmann/json.hpp>

#include "dice/util/error.h"

namespace dice::judge {

namespace {
struct NamedFailure {
  Failure f;
  const char* name;
};
constexpr NamedFailure kNames[] = {
    {Failure::kNone, "none"},
    {Failure::kNoCode, "no_code"},
    {Failure::kStaticReject, "static_reject"},
    {Failure::kCompileError, "compile_error"},
    {Failure::kCompileTimeout, "compile_timeout"},
    {Failure::kLoadError, "load_error"},
    {Failure::kRuntimeError, "runtime_error"},
    {Failure::kWrongShape, "wrong_shape"},
    {Failure::kWrongValue, "wrong_value"},
    {Failure::kInputMutated, "input_mutated"},
    {Failure::kNondeterministic, "nondeterministic"},
    {Failure::kTimeout, "timeout"},
    {Failure::kCrash, "crash"},
    {Failure::kResourceLimit, "resource_limit"},
    {Failure::kSandboxViolation, "sandbox_violation"},
    {Failure::kNoOwnKernel, "no_own_kernel"},
    {Failure::kLeftoverProcess, "leftover_process"},
    {Failure::kTimingTampered, "timing_tampered"},
    {Failure::kJudgeError, "judge_error"},
};
}  // namespace

const char* failure_name(Failure f) {
  for (const auto& n : kNames)
    if (n.f == f) return n.name;
  return "judge_error";
}

Failure failure_from_name(const std::string& name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.f;
  std::string all;
  for (const auto& n : kNames) all += std::string(all.empty() ? "" : ", ") + n.name;
  throw Error(str("unknown failure class '", name, "' (expected one of: ", all, ")"));
}

void to_json(nlohmann::json& j, const Finding& f) {
  j = nlohmann::json{{"check", f.check}, {"severity", f.severity}, {"detail", f.detail}};
}

void from_json(const nlohmann::json& j, Finding& f) {
  DICE_REQUIRE(j.is_object(), "a verdict finding must be a JSON object, got ", j.dump());
  f.check = j.value("check", "");
  f.severity = j.value("severity", "");
  f.detail = j.value("detail", "");
}

void to_json(nlohmann::json& j, const Verdict& v) {
  j = nlohmann::json{{"task_id", v.task_id},
                     {"extracted", v.extracted},
                     {"findings", v.findings},
                     {"compiled", v.compiled},
                     {"correct", v.correct},
                     {"max_abs_error", v.max_abs_error},
                     {"runtime_ms", v.runtime_ms},
                     {"ref_runtime_ms", v.ref_runtime_ms},
                     {"speedup", v.speedup},
                     {"speedup_host", v.speedup_host},
                     {"flags", v.flags},
                     {"failure", failure_name(v.failure)},
                     {"log_tail", v.log_tail},
                     {"compile_s", v.compile_s},
                     {"exec_s", v.exec_s},
                     {"cache_hit", v.cache_hit}};
  if (v.same_as >= 0) j["same_as"] = v.same_as;
  if (v.reused) j["reused"] = true;
}

void from_json(const nlohmann::json& j, Verdict& v) {
  DICE_REQUIRE(j.is_object(), "a verdict must be a JSON object, got ", j.dump().substr(0, 80));
  try {
    v.task_id = j.at("task_id").get<std::string>();
    v.extracted = j.value("extracted", false);
    v.findings = j.value("findings", std::vector<Finding>{});
    v.compiled = j.value("compiled", false);
    v.correct = j.value("correct", false);
    v.max_abs_error = j.value("max_abs_error", -1.0);
    v.runtime_ms = j.value("runtime_ms", -1.0);
    v.ref_runtime_ms = j.value("ref_runtime_ms", -1.0);
    v.speedup = j.value("speedup", -1.0);
    v.speedup_host = j.value("speedup_host", -1.0);
    v.flags = j.value("flags", std::vector<std::string>{});
    v.failure = failure_from_name(j.value("failure", "none"));
    v.log_tail = j.value("log_tail", "");
    v.compile_s = j.value("compile_s", 0.0);
    v.exec_s = j.value("exec_s", 0.0);
    v.cache_hit = j.value("cache_hit", false);
    v.same_as = j.value("same_as", -1);
    v.reused = j.value("reused", false);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("malformed verdict record: ", e.what()));
  }
}

}  // namespace dice::judge
