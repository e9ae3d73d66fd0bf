#include "dice/train/master_weights.h"

#include <torch/torch.h>

namespace dice::train {

MasterWeights::MasterWeights(model::Transformer master, const Options& o)
    : master_(std::move(master)), zero1_(o.zero1) {
  AdamW::Named named;
  int64_t total = 0;
  for (auto& p : master_->named_parameters()) {
    named.emplace_back(p.key(), p.value());
    params_.push_back(p.value());
    total += p.value().numel();
  }
  const auto dev = master_->device();
  grad_flat_ = torch::zeros({total}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
  attach_grads(params_, grad_flat_);
  if (o.compute_dtype != master_->dtype()) {
    compute_.emplace(master_->config(), o.compute_dtype, dev);
    for (auto& p : (*compute_)->named_parameters()) compute_params_.push_back(p.value());
    compute_grad_flat_ = torch::zeros({total}, torch::TensorOptions().dtype(o.compute_dtype).device(dev));
    attach_grads(compute_params_, compute_grad_flat_);
    refresh_compute();
  }
  if (o.optimizer) adam_ = std::make_unique<AdamW>(std::move(named), o.adam, o.shard, o.shards);
}

void MasterWeights::zero_grads() {
  grad_flat_.zero_();
  attach_grads(params_, grad_flat_);  // (in case someone reset a gradient)
  if (compute_) {
    compute_grad_flat_.zero_();
    attach_grads(compute_params_, compute_grad_flat_);
  }
}

void MasterWeights::refresh_compute() {
  if (!compute_) return;
  torch::NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) compute_params_[i].copy_(params_[i]);
}

void MasterWeights::accumulate() {
  if (!compute_) return;
  torch::NoGradGuard ng;
  grad_flat_.add_(compute_grad_flat_);
  compute_grad_flat_.zero_();
}

void MasterWeights::all_reduce(dist::Comm& comm) {
  if (comm.size() > 1) comm.all_reduce(grad_flat_);  // every gradient at once (one buffer)
}

double MasterWeights::clip(double max_norm) { return clip_grad_norm_flat(grad_flat_, max_norm); }

void MasterWeights::step(double lr, dist::Comm& comm, int64_t bucket_bytes) {
  adam_->step(lr);
  if (zero1_) broadcast_owned(*adam_, comm, bucket_bytes);
}

ckpt::SaveOptions learner_save_options(dist::Comm& group, int rank, bool leader, int keep_last,
                                       const std::string& model_dir, const std::vector<std::string>& side_files) {
  ckpt::SaveOptions so;
  so.rank = rank;
  so.leader = leader;
  so.keep_last = keep_last;
  for (const auto& f : side_files) so.copy_files.push_back(model_dir + "/" + f);
  dist::Comm* c = &group;
  so.barrier = [c] { c->barrier(); };
  return so;
}

std::string MasterWeights::save_checkpoint(const std::string& run_dir, const ckpt::TrainState& ts,
                                          const ckpt::SaveOptions& so) {
  auto sd = so.leader ? master_->state_dict(torch::kFloat32) : model::NamedTensors{};
  auto os = adam_->state();
  const bool writes_optim = zero1_ || so.leader;
  return ckpt::save_checkpoint(run_dir, ts.step, sd, writes_optim ? &os : nullptr, ts, so);
}

}  // namespace dice::train
