#pragma once
// Data scheduling (recipe §4.4): the task file's order is the curriculum (easy -> hard). Each step
// takes the next tasks_per_step tasks with wrap-around; the cursor (tasks drawn so far in the
// stage) is all the state there is, and checkpoints save it. "shuffled" draws each pass over the
// file in a permutation fixed by (seed, pass), so it too is a pure function of the cursor.
#include <cstdint>
#include <string>
#include <vector>

namespace dice::rl {

class Curriculum {
 public:
  Curriculum(int64_t num_tasks, int64_t tasks_per_step, std::string order = "sequential", uint64_t seed = 0);
  // Task indices of the step that starts at `cursor`; the next step starts at cursor + tasks_per_step.
  std::vector<int64_t> tasks_at(int64_t cursor) const;
  int64_t tasks_per_step() const { return per_step_; }

 private:
  int64_t n_, per_step_;
  std::string order_;
  uint64_t seed_;
};

}  // namespace dice::rl
