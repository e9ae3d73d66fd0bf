// LearnerLoop: rows -> old log-probs -> updates (see learner_loop.h).
#include "dice/train/learner_loop.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "dice/rl/loss.h"
#include "dice/rl/trace.h"
#include "dice/util/timer.h"

namespace dice::train {

struct LearnerLoop::Item {
  const Rollout* r = nullptr;
  std::vector<rl::TraceRow> rows;
  int64_t targets = 0;
};

// Rows are collated (ids, masks on the device) only while their micro-batch runs, once for the old
// log-probs and once for the update: the step's masks are never resident all at once.
struct LearnerLoop::MicroBatch {
  std::vector<std::pair<size_t, size_t>> rows;  // (item, row)
  torch::Tensor old_lp, ref_lp;                 // [N], in the batch's target order
};

namespace {
rl::TraceBatch collate_rows(const std::vector<std::pair<size_t, size_t>>& which,
                            const std::vector<std::vector<rl::TraceRow>>& rows_of_item, torch::Device device) {
  std::vector<rl::TraceRow> rows;
  for (auto [i, j] : which) rows.push_back(rows_of_item[i][j]);
  return rl::collate(rows, device);
}
}  // namespace

LearnerLoop::LearnerLoop(const RlRunConfig& cfg, model::Transformer master, dist::Comm& learners,
                         std::optional<model::Transformer> reference)
    : cfg_(cfg), model_(std::move(master)), comm_(learners), reference_(std::move(reference)) {
  AdamW::Named named;
  for (auto& p : model_->named_parameters()) named.emplace_back(p.key(), p.value());
  AdamWOptions o{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  adam_ = std::make_unique<AdamW>(std::move(named), o, cfg.optim.zero1 ? comm_.rank() : 0,
                                  cfg.optim.zero1 ? comm_.size() : 1);
}

std::vector<torch::Tensor> LearnerLoop::params() const {
  std::vector<torch::Tensor> out;
  for (const auto& [name, p] : adam_->params()) out.push_back(p);
  return out;
}

std::vector<LearnerLoop::MicroBatch> LearnerLoop::micro_batches(const std::vector<Item>& items, int64_t u) const {
  std::vector<MicroBatch> out;
  std::vector<const rl::TraceRow*> cur;
  MicroBatch mb;
  auto flush = [&]() {
    if (mb.rows.empty()) return;
    out.push_back(std::move(mb));
    mb = MicroBatch{};
    cur.clear();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].r->kept / cfg_.optim.responses_per_update != u) continue;
    for (size_t j = 0; j < items[i].rows.size(); ++j) {
      cur.push_back(&items[i].rows[j]);
      if (!mb.rows.empty() && rl::padded_tokens(cur) > cfg_.optim.micro_batch_tokens) {
        cur.pop_back();
        flush();
        cur.push_back(&items[i].rows[j]);
      }
      mb.rows.emplace_back(i, j);
    }
  }
  flush();
  return out;
}

nlohmann::json LearnerLoop::step(const std::vector<Rollout>& mine) {
  nlohmann::json m;
  const auto dev = model_->device();
  // ---- rows ----
  Timer t_rows;
  rl::TraceOptions to;
  to.block_size = model_->config().block_size;
  to.mask_token_id = model_->config().mask_token_id;
  to.shrink = cfg_.trace.shrink;
  to.layout = cfg_.trace.layout;
  std::vector<Item> items;
  for (const auto& r : mine) {
    if (r.kept < 0) continue;
    Item it;
    it.r = &r;
    it.rows = rl::trace_rows(r.traj, to, static_cast<int64_t>(items.size()));
    for (const auto& row : it.rows) it.targets += static_cast<int64_t>(row.target_pos.size());
    items.push_back(std::move(it));
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.r->kept < b.r->kept; });
  for (size_t i = 0; i < items.size(); ++i)
    for (auto& row : items[i].rows) row.trajectory = static_cast<int64_t>(i);

  // ---- step-wide sizes, over all learners: K kept samples, L1 the longest response ----
  auto sizes = torch::zeros({2}, torch::kInt64);
  for (const auto& it : items) {
    sizes[0] = std::max(sizes[0].item<int64_t>(), it.r->kept + 1);
    sizes[1] = std::max(sizes[1].item<int64_t>(), static_cast<int64_t>(it.r->traj.response_ids.size()));
  }
  auto sizes_d = sizes.to(comm_.device());
  comm_.all_reduce(sizes_d, dist::ReduceOp::kMax);
  sizes = sizes_d.cpu();
  const int64_t K = sizes[0].item<int64_t>(), L1 = std::max<int64_t>(1, sizes[1].item<int64_t>());
  const int64_t rpu = cfg_.optim.responses_per_update, U = (K + rpu - 1) / rpu;
  auto targets = torch::zeros({std::max<int64_t>(U, 1)}, torch::kFloat64);
  for (const auto& it : items) targets[it.r->kept / rpu] += static_cast<double>(it.targets);
  auto targets_d = targets.to(comm_.device());
  comm_.all_reduce(targets_d);
  targets = targets_d.cpu();
  std::vector<std::vector<MicroBatch>> mbs;
  for (int64_t u = 0; u < U; ++u) mbs.push_back(micro_batches(items, u));
  std::vector<std::vector<rl::TraceRow>> rows_of_item;
  for (auto& it : items) rows_of_item.push_back(std::move(it.rows));
  m["time_rows_s"] = t_rows.elapsed_s();

  // ---- old log-probs (and the frozen reference's), before any update ----
  Timer t_old;
  double gap_sum = 0, gap_max = 0, gap_n = 0;
  {
    torch::NoGradGuard ng;
    for (auto& per_update : mbs)
      for (auto& mb : per_update) {
        const auto batch = collate_rows(mb.rows, rows_of_item, dev);
        mb.old_lp = rl::token_logprobs(model_, batch).detach();
        if (reference_) mb.ref_lp = rl::token_logprobs(*reference_, batch).detach();
        // How far the learner's scores are from the sampler's (0 up to rounding when both run in
        // fp32: the invariant the trace tests check; bf16 sampling shows its rounding here).
        auto old_cpu = mb.old_lp.cpu();
        auto old_a = old_cpu.accessor<float, 1>();
        auto tr = batch.target_traj_N.accessor<int64_t, 1>();
        auto rp = batch.target_resp_N.accessor<int64_t, 1>();
        for (int64_t j = 0; j < old_cpu.size(0); ++j) {
          const auto& lps = items[static_cast<size_t>(tr[j])].r->logprobs;
          if (lps.empty()) continue;
          const double d = std::abs(static_cast<double>(old_a[j]) - lps[static_cast<size_t>(rp[j])]);
          gap_sum += d;
          gap_max = std::max(gap_max, d);
          gap_n += 1;
        }
      }
  }
  m["time_old_logp_s"] = t_old.elapsed_s();

  // ---- the updates ----
  Timer t_update;
  // acc: loss, policy, kl (weighted), kl per token sum, clipped, tokens, row tokens, grad norm sum
  std::vector<double> acc(8, 0.0);
  for (int64_t u = 0; u < U; ++u) {
    const int64_t responses = std::min(rpu, K - u * rpu);
    run_update(mbs[static_cast<size_t>(u)], rows_of_item, items, L1, responses, targets[u].item<double>(), acc);
  }
  if (dev.is_cuda()) torch::cuda::synchronize();
  m["time_update_s"] = t_update.elapsed_s();

  auto acc_t = torch::tensor(std::vector<double>(acc.begin(), acc.begin() + 7), torch::kFloat64).to(comm_.device());
  comm_.all_reduce(acc_t);
  acc_t = acc_t.cpu();
  auto gap = torch::tensor({gap_sum, gap_n}, torch::kFloat64).to(comm_.device());
  comm_.all_reduce(gap);
  gap = gap.cpu();
  auto gmax = torch::tensor({gap_max}, torch::kFloat64).to(comm_.device());
  comm_.all_reduce(gmax, dist::ReduceOp::kMax);
  const double tokens = acc_t[5].item<double>();
  m["kept_samples"] = K;
  m["updates"] = U;
  m["padded_response_len"] = L1;
  m["loss"] = acc_t[0].item<double>();  // summed over updates
  m["policy_loss"] = acc_t[1].item<double>();
  m["kl"] = tokens > 0 ? acc_t[3].item<double>() / tokens : 0.0;
  m["clip_fraction"] = tokens > 0 ? acc_t[4].item<double>() / tokens : 0.0;
  m["target_tokens"] = static_cast<int64_t>(tokens);
  m["row_tokens"] = static_cast<int64_t>(acc_t[6].item<double>());
  m["grad_norm"] = U > 0 ? acc[7] / static_cast<double>(U) : 0.0;
  m["logp_gap_mean"] = gap[1].item<double>() > 0 ? gap[0].item<double>() / gap[1].item<double>() : 0.0;
  m["logp_gap_max"] = gmax.cpu().item<double>();
  return m;
}

void LearnerLoop::run_update(std::vector<MicroBatch>& mbs, const std::vector<std::vector<rl::TraceRow>>& rows_of_item,
                             const std::vector<Item>& items, int64_t L1, int64_t responses, double targets,
                             std::vector<double>& acc) {
  auto ps = params();
  for (auto& p : ps) p.mutable_grad() = torch::Tensor();
  const auto& norm = cfg_.loss.norm;
  for (auto& mb : mbs) {
    const auto batch = collate_rows(mb.rows, rows_of_item, model_->device());
    auto tr = batch.target_traj_N.accessor<int64_t, 1>();
    const int64_t N = batch.target_traj_N.size(0);
    std::vector<double> adv(static_cast<size_t>(N)), w(static_cast<size_t>(N));
    for (int64_t j = 0; j < N; ++j) {
      const auto& it = items[static_cast<size_t>(tr[j])];
      adv[j] = it.r->traj.advantage;
      w[j] = norm == "padded_len"   ? 1.0 / (static_cast<double>(L1) * responses)
             : norm == "token_mean" ? 1.0 / targets
                                    : 1.0 / (static_cast<double>(it.targets) * responses);
    }
    auto dev = model_->device();
    auto lp = rl::token_logprobs(model_, batch);
    auto out = rl::tracerl_loss(lp, mb.old_lp, mb.ref_lp, torch::tensor(adv, torch::kFloat64).to(dev),
                                torch::tensor(w, torch::kFloat64).to(dev), cfg_.loss);
    out.loss.backward();
    acc[0] += out.loss.item<double>();
    acc[1] += out.policy_sum;
    acc[2] += out.kl_sum;
    acc[3] += out.kl_token_sum;
    acc[4] += static_cast<double>(out.clipped);
    acc[5] += static_cast<double>(out.tokens);
    acc[6] += static_cast<double>(batch.rows * batch.row_tokens);
  }
  dist::all_reduce_gradients(comm_, ps, 1.0, cfg_.dist.bucket_mb << 20);
  acc[7] += clip_grad_norm(ps, cfg_.optim.grad_clip);
  adam_->step(cfg_.optim.lr);
  if (cfg_.optim.zero1) sync_zero1();
}

void LearnerLoop::sync_zero1() {
  // Each parameter leaves its owner's update for every other learner (fp32, in place).
  const auto& named = adam_->params();
  for (int r = 0; r < comm_.size(); ++r) {
    std::vector<torch::Tensor> owned;
    for (size_t i = 0; i < named.size(); ++i)
      if (adam_->owner(i) == r) owned.push_back(named[i].second);
    if (!owned.empty()) dist::broadcast_parameters(comm_, owned, r, torch::kFloat32, cfg_.dist.bucket_mb << 20);
  }
}

}  // namespace dice::train
