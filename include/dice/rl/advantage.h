#pragma once
// Group advantages (recipe §4.5): the G rewards of one task are z-scored with the population
// standard deviation; a group whose rewards are all equal carries no signal and is dropped.
//
// The function sees the rewards of every sample of the step, in sample order (sample i belongs to
// group i / group_size), so actors that all-gather the rewards and call it get bit-identical
// advantages however the samples were spread over them.
#include <cstdint>
#include <vector>

namespace dice::rl {

struct GroupAdvantages {
  std::vector<double> advantage;  // per sample; 0 for dropped groups
  std::vector<bool> keep;         // per sample: its group has non-zero variance
  int64_t groups = 0;
  int64_t zero_variance_groups = 0;
};

// rewards.size() must be a multiple of group_size. A group is dropped when its std <= min_std.
GroupAdvantages group_advantages(const std::vector<double>& rewards, int64_t group_size, double min_std = 1e-12);

}  // namespace dice::rl
