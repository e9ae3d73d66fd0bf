#pragma once
// Rewards (DESIGN §5): pure functions of a Verdict.
//
//   exec     r = 1 if compiled and correct, else 0                       (DICE's code)
//   speedup  r = 1 if correct and speedup >= tau, else 0                 (DICE's text)
//   graded   r = 0 if not correct, else 0.5 + 0.5 * clamp(log2(s) / log2(cap), 0, 1)
//            with s the speedup (1 when not timed) and cap = max(tau, 1.01): a correct kernel
//            earns 0.5, reaching the cap earns 1; slower than the reference earns no bonus,
//            and speedups beyond the cap are clipped (outliers cannot dominate a group).
#include <string>

#include "dice/judge/verdict.h"

namespace dice::judge {

enum class RewardKind { kExec, kSpeedup, kGraded };

RewardKind reward_kind_from_name(const std::string& name);  // throws dice::Error on unknown names
const char* reward_kind_name(RewardKind kind);

double reward(const Verdict& v, RewardKind kind, double tau);

}  // namespace dice::judge
