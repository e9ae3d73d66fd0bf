// Group z-scores with population std; zero-variance groups dropped (recipe §4.5).
#include "dice/rl/advantage.h"

#include <cmath>

#include "dice/util/error.h"

namespace dice::rl {

GroupAdvantages group_advantages(const std::vector<double>& rewards, int64_t group_size, double min_std) {
  DICE_REQUIRE(group_size >= 1, "group_size must be >= 1, got ", group_size, ".");
  const int64_t n = static_cast<int64_t>(rewards.size());
  DICE_REQUIRE(n % group_size == 0, "There are ", n, " rewards, not a multiple of the group size ", group_size, ".");
  GroupAdvantages out;
  out.advantage.assign(rewards.size(), 0.0);
  out.keep.assign(rewards.size(), false);
  out.groups = n / group_size;
  for (int64_t g = 0; g < out.groups; ++g) {
    const int64_t b = g * group_size;
    double mean = 0;
    for (int64_t i = 0; i < group_size; ++i) mean += rewards[b + i];
    mean /= static_cast<double>(group_size);
    double var = 0;
    for (int64_t i = 0; i < group_size; ++i) var += (rewards[b + i] - mean) * (rewards[b + i] - mean);
    const double std = std::sqrt(var / static_cast<double>(group_size));
    if (!(std > min_std)) {
      ++out.zero_variance_groups;
      continue;
    }
    for (int64_t i = 0; i < group_size; ++i) {
      out.advantage[b + i] = (rewards[b + i] - mean) / std;
      out.keep[b + i] = true;
    }
  }
  return out;
}

}  // namespace dice::rl
