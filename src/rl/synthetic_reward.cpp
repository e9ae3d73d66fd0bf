// The synthetic token-share reward (see synthetic_reward.h).
#include "dice/rl/synthetic_reward.h"

#include <algorithm>

#include "dice/util/error.h"

namespace dice::rl {

void TokenShareReward::validate() const {
  DICE_REQUIRE(!ranges.empty(), "reward.synthetic.ranges needs at least one [begin, end) range.");
  for (const auto& r : ranges)
    DICE_REQUIRE(r.size() == 2 && r[0] >= 0 && r[0] < r[1], "reward.synthetic.ranges entries must be [begin, end) with ",
                 "0 <= begin < end.");
}

double TokenShareReward::operator()(const std::vector<int64_t>& response, const std::vector<int64_t>& stop_ids) const {
  int64_t n = 0, in = 0;
  for (auto t : response) {
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) continue;
    ++n;
    for (const auto& r : ranges)
      if (t >= r[0] && t < r[1]) {
        ++in;
        break;
      }
  }
  return n ? static_cast<double>(in) / static_cast<double>(n) : 0.0;
}

}  // namespace dice::rl
