#pragma once
// AdamW over fp32 master weights, with optional ZeRO-1 ownership (each learner keeps the moments
// of, and updates, only the parameters it owns; the caller then broadcasts each parameter from
// its owner). Our own implementation so that its state is plain named tensors (checkpoints) and
// its arithmetic is fixed (bit-identical resumes):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t += 1
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + lr * wd * p
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dice/ckpt/checkpoint.h"
#include "dice/dist/comm.h"

namespace dice::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  using Named = std::vector<std::pair<std::string, torch::Tensor>>;
  // `shards` learners share the state when > 1 (ZeRO-1); this one is `shard`.
  AdamW(Named params, AdamWOptions opts, int shard = 0, int shards = 1);

  // One update of the owned parameters from their (already reduced) gradients.
  void step(double lr);
  int owner(size_t i) const { return owner_[i]; }
  const Named& params() const { return params_; }
  int64_t steps() const { return t_; }

  ckpt::OptimState state() const;  // the owned parameters' moments
  // Restores state(); names must be exactly the owned parameters (else a dice::Error naming them).
  void load(const ckpt::OptimState& s);

 private:
  Named params_;
  AdamWOptions o_;
  int shard_;
  std::vector<int> owner_;
  std::vector<torch::Tensor> m_, v_;  // undefined for parameters owned elsewhere
  int64_t t_ = 0;
};

// After a ZeRO-1 step: every parameter leaves its owner for every other learner (fp32, in place,
// in buckets of `bucket_bytes`).
void broadcast_owned(const AdamW& adam, dist::Comm& learners, int64_t bucket_bytes);

// Global L2 norm of the gradients; when max_norm > 0 and the norm exceeds it, scales them to it.
// Returns the norm before clipping.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);
// The same over one flat gradient buffer (all parameters' gradients as views of it), summed on
// the device in fp64 pieces of `piece` elements: one host sync instead of one per parameter.
double clip_grad_norm_flat(torch::Tensor& flat, double max_norm, int64_t piece = 1 << 26);
// Makes every parameter's gradient a view of `flat` (numel = their sum; zeroed by the caller).
void attach_grads(const std::vector<torch::Tensor>& params, torch::Tensor& flat);

}  // namespace dice::train
