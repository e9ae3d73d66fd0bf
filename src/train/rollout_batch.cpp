// Rollouts <-> one int64 tensor. Layout: [count, then per rollout: sample, kept, task, reward bits,
// advantage bits, stop_token, P, R, T, prompt (P), response (R), steps (R), logprob bits (R), tail
// (T), tail steps (T)]. Doubles and floats travel as their bit patterns, so nothing is rounded.
#include "dice/train/rollout_batch.h"

#include <torch/torch.h>

#include <cstring>

#include "dice/util/error.h"

namespace dice::train {
namespace {

int64_t bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}
double from_bits(int64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}

}  // namespace

torch::Tensor pack_rollouts(const std::vector<Rollout>& rs) {
  std::vector<int64_t> v{static_cast<int64_t>(rs.size())};
  for (const auto& r : rs) {
    const auto& t = r.traj;
    DICE_CHECK(t.step_map.size() == t.response_ids.size() && t.tail_steps.size() == t.tail_ids.size() &&
               (r.logprobs.empty() || r.logprobs.size() == t.response_ids.size()));
    v.insert(v.end(), {r.sample, r.kept, r.task, bits(r.reward), bits(t.advantage), r.stop_token,
                       static_cast<int64_t>(t.prompt_ids.size()), static_cast<int64_t>(t.response_ids.size()),
                       static_cast<int64_t>(t.tail_ids.size()), static_cast<int64_t>(!r.logprobs.empty())});
    v.insert(v.end(), t.prompt_ids.begin(), t.prompt_ids.end());
    v.insert(v.end(), t.response_ids.begin(), t.response_ids.end());
    v.insert(v.end(), t.step_map.begin(), t.step_map.end());
    for (float f : r.logprobs) v.push_back(bits(static_cast<double>(f)));
    v.insert(v.end(), t.tail_ids.begin(), t.tail_ids.end());
    v.insert(v.end(), t.tail_steps.begin(), t.tail_steps.end());
  }
  return torch::tensor(v, torch::kInt64);
}

std::vector<Rollout> unpack_rollouts(const torch::Tensor& packed) {
  auto t = packed.to(torch::kCPU).contiguous();
  DICE_CHECK(t.dim() == 1 && t.numel() >= 1, "a packed rollout tensor is 1-D with a count");
  const int64_t* p = t.data_ptr<int64_t>();
  const int64_t* end = p + t.numel();
  auto take = [&](int64_t n) {
    DICE_CHECK(n >= 0 && p + n <= end, "a packed rollout tensor is truncated");
    std::vector<int64_t> out(p, p + n);
    p += n;
    return out;
  };
  const int64_t n = take(1)[0];
  std::vector<Rollout> rs(static_cast<size_t>(n));
  for (auto& r : rs) {
    auto h = take(10);
    r.sample = h[0];
    r.kept = h[1];
    r.task = h[2];
    r.reward = from_bits(h[3]);
    r.traj.advantage = from_bits(h[4]);
    r.stop_token = h[5];
    const int64_t P = h[6], R = h[7], T = h[8];
    r.traj.prompt_ids = take(P);
    r.traj.response_ids = take(R);
    r.traj.step_map = take(R);
    if (h[9]) {
      for (auto b : take(R)) r.logprobs.push_back(static_cast<float>(from_bits(b)));
    }
    r.traj.tail_ids = take(T);
    r.traj.tail_steps = take(T);
  }
  DICE_CHECK(p == end, "a packed rollout tensor has trailing data");
  return rs;
}

}  // namespace dice::train
