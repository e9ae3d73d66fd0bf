#pragma once
// A synthetic reward for smoke tests and the quickstart ("synthetic_token_share" in configs): the
// share of a response's tokens whose id lies in target ranges. It needs no judge and a random
// policy already gets a spread of values, so a working trainer raises it within minutes on a CPU.
// It measures nothing about kernels.
#include <cstdint>
#include <utility>
#include <vector>

namespace dice::rl {

struct TokenShareReward {
  std::vector<std::vector<int64_t>> ranges = {{0, 50000}};  // [begin, end) token-id ranges
  template <class V> void visit(V& v) { v("ranges", ranges, "[begin, end) token-id ranges that earn reward"); }
  void validate() const;
  // Share of `response` (stop tokens excluded) inside the ranges; 0 for an empty response.
  double operator()(const std::vector<int64_t>& response, const std::vector<int64_t>& stop_ids) const;
};

}  // namespace dice::rl
