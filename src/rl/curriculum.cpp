// Sequential (wrap-around) and shuffled-per-pass task schedules.
#include "dice/rl/curriculum.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "dice/util/error.h"

namespace dice::rl {

Curriculum::Curriculum(int64_t num_tasks, int64_t tasks_per_step, std::string order, uint64_t seed)
    : n_(num_tasks), per_step_(tasks_per_step), order_(std::move(order)), seed_(seed) {
  DICE_REQUIRE(n_ > 0, "The curriculum has no tasks.");
  DICE_REQUIRE(per_step_ > 0, "tasks_per_step must be > 0, got ", per_step_, ".");
  DICE_REQUIRE(order_ == "sequential" || order_ == "shuffled", "curriculum order must be sequential or shuffled, got '",
               order_, "'.");
}

std::vector<int64_t> Curriculum::tasks_at(int64_t cursor) const {
  DICE_REQUIRE(cursor >= 0, "curriculum cursor must be >= 0, got ", cursor, ".");
  std::vector<int64_t> out;
  std::vector<int64_t> perm;
  int64_t perm_pass = -1;
  for (int64_t i = 0; i < per_step_; ++i) {
    const int64_t k = cursor + i, pass = k / n_, pos = k % n_;
    if (order_ == "sequential") {
      out.push_back(pos);
      continue;
    }
    if (pass != perm_pass) {
      perm.resize(static_cast<size_t>(n_));
      std::iota(perm.begin(), perm.end(), 0);
      // A fixed generator and a hand-rolled Fisher-Yates: std::shuffle's algorithm is not specified.
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(pass));
      for (int64_t j = n_ - 1; j > 0; --j) std::swap(perm[j], perm[rng() % static_cast<uint64_t>(j + 1)]);
      perm_pass = pass;
    }
    out.push_back(perm[static_cast<size_t>(pos)]);
  }
  return out;
}

}  // namespace dice::rl
