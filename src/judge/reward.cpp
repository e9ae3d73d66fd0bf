// Reward functions of a Verdict (formulas in reward.h).
#include "dice/judge/reward.h"

#include <algorithm>
#include <cmath>

#include "dice/util/error.h"

namespace dice::judge {

RewardKind reward_kind_from_name(const std::string& name) {
  if (name == "exec") return RewardKind::kExec;
  if (name == "speedup") return RewardKind::kSpeedup;
  if (name == "graded") return RewardKind::kGraded;
  throw Error(str("unknown reward kind '", name, "' (expected exec, speedup or graded)"));
}

const char* reward_kind_name(RewardKind kind) {
  switch (kind) {
    case RewardKind::kExec: return "exec";
    case RewardKind::kSpeedup: return "speedup";
    case RewardKind::kGraded: return "graded";
  }
  return "exec";
}

double reward(const Verdict& v, RewardKind kind, double tau) {
  const bool ok = v.compiled && v.correct && v.failure == Failure::kNone;
  if (!ok) return 0.0;
  switch (kind) {
    case RewardKind::kExec:
      return 1.0;
    case RewardKind::kSpeedup:
      return v.speedup >= tau && v.speedup > 0 ? 1.0 : 0.0;
    case RewardKind::kGraded: {
      double s = v.speedup > 0 ? v.speedup : 1.0;
      double cap = std::max(tau, 1.01);
      double bonus = std::clamp(std::log2(s) / std::log2(cap), 0.0, 1.0);
      return 0.5 + 0.5 * bonus;
    }
  }
  return 0.0;
}

}  // namespace dice::judge
