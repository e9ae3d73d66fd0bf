#pragma once
// Wall-clock timing helpers (steady clock).
#include <chrono>
#include <map>
#include <mutex>
#include <string>

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

// Seconds spent per named phase, summed over threads (what `dice bench judge` splits a run into).
class PhaseTotals {
 public:
  struct Total {
    double seconds = 0;
    long count = 0;
  };
  void add(const std::string& phase, double seconds) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& t = totals_[phase];
    t.seconds += seconds;
    ++t.count;
  }
  std::map<std::string, Total> snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    return totals_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Total> totals_;
};

}  // namespace dice
