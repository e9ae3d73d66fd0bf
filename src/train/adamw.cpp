// AdamW with ZeRO-1 ownership (see adamw.h).
#include "dice/train/adamw.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "dice/util/error.h"

namespace dice::train {

AdamW::AdamW(Named params, AdamWOptions opts, int shard, int shards)
    : params_(std::move(params)), o_(opts), shard_(shard) {
  DICE_REQUIRE(shards >= 1 && shard >= 0 && shard < shards, "AdamW shard ", shard, " of ", shards, " is invalid.");
  // Balance by size, deterministically: each parameter goes to the least-loaded shard so far.
  std::vector<int64_t> load(static_cast<size_t>(shards), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    int best = 0;
    for (int s = 1; s < shards; ++s)
      if (load[s] < load[best]) best = s;
    owner_.push_back(best);
    load[best] += params_[i].second.numel();
    const bool mine = best == shard_;
    m_.push_back(mine ? torch::zeros_like(params_[i].second) : torch::Tensor());
    v_.push_back(mine ? torch::zeros_like(params_[i].second) : torch::Tensor());
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard ng;
  ++t_;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != shard_) continue;
    auto& p = params_[i].second;
    auto g = p.grad();
    if (!g.defined()) g = torch::zeros_like(p);
    m_[i].mul_(o_.beta1).add_(g, 1 - o_.beta1);
    v_[i].mul_(o_.beta2).addcmul_(g, g, 1 - o_.beta2);
    auto denom = (v_[i] / bc2).sqrt_().add_(o_.eps);
    if (o_.weight_decay != 0) p.mul_(1 - lr * o_.weight_decay);
    p.addcdiv_(m_[i], denom, -lr / bc1);
  }
}

ckpt::OptimState AdamW::state() const {
  ckpt::OptimState s;
  s.step = t_;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != shard_) continue;
    s.m[params_[i].first] = m_[i].detach().cpu().clone();
    s.v[params_[i].first] = v_[i].detach().cpu().clone();
  }
  return s;
}

void AdamW::load(const ckpt::OptimState& s) {
  size_t owned = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != shard_) continue;
    ++owned;
    const auto& name = params_[i].first;
    auto mi = s.m.find(name), vi = s.v.find(name);
    DICE_REQUIRE(mi != s.m.end() && vi != s.v.end(), "The optimizer state has no moments for parameter '", name,
                 "': it was saved by a run with another model or another learner/ZeRO-1 layout.");
    DICE_REQUIRE(mi->second.sizes() == params_[i].second.sizes(), "The optimizer state of '", name, "' has shape ",
                 mi->second.sizes(), ", the model's parameter ", params_[i].second.sizes(), ".");
    torch::NoGradGuard ng;
    m_[i].copy_(mi->second);
    v_[i].copy_(vi->second);
  }
  DICE_REQUIRE(s.m.size() == owned, "The optimizer state holds ", s.m.size(), " parameters, this learner owns ", owned,
               ": it was saved with another learner/ZeRO-1 layout.");
  t_ = s.step;
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  double sq = 0;
  for (const auto& p : params)
    if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

double clip_grad_norm_flat(torch::Tensor& flat, double max_norm, int64_t piece) {
  torch::NoGradGuard ng;
  auto sq = torch::zeros({}, flat.options().dtype(torch::kFloat64));
  const int64_t n = flat.numel();
  for (int64_t s = 0; s < n; s += piece) sq += flat.narrow(0, s, std::min(piece, n - s)).to(torch::kFloat64).pow(2).sum();
  const double norm = std::sqrt(sq.item<double>());
  if (max_norm > 0 && norm > max_norm) flat.mul_(max_norm / (norm + 1e-6));
  return norm;
}

void attach_grads(const std::vector<torch::Tensor>& params, torch::Tensor& flat) {
  int64_t off = 0;
  for (const auto& p : params) {
    auto& g = const_cast<torch::Tensor&>(p).mutable_grad();
    const int64_t n = p.numel();
    if (!g.defined() || g.data_ptr() != flat.narrow(0, off, n).data_ptr()) g = flat.narrow(0, off, n).view_as(p);
    off += n;
  }
}

void broadcast_owned(const AdamW& adam, dist::Comm& learners, int64_t bucket_bytes) {
  const auto& named = adam.params();
  for (int r = 0; r < learners.size(); ++r) {
    std::vector<torch::Tensor> owned;
    for (size_t i = 0; i < named.size(); ++i)
      if (adam.owner(i) == r) owned.push_back(named[i].second);
    if (!owned.empty()) dist::broadcast_parameters(learners, owned, r, torch::kFloat32, bucket_bytes);
  }
}

}  // namespace dice::train
