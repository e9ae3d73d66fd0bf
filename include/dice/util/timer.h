#pragma once
// Wall-clock timing helpers (steady clock).
#include <chrono>

namespace dice {

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Timer {
 public:
  Timer() : start_s_(now_s()) {}
  void reset() { start_s_ = now_s(); }
  double elapsed_s() const { return now_s() - start_s_; }
  double elapsed_ms() const { return 1e3 * elapsed_s(); }

 private:
  double start_s_;
};

}  // namespace dice
