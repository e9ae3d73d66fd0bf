// LearnerLoop: rows -> old log-probs -> updates (see learner_loop.h).
#include "dice/train/learner_loop.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "dice/rl/loss.h"
#include "dice/rl/trace.h"
#include "dice/train/model_source.h"
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

// What a step's updates add up to (its metrics), over micro-batches here, then over learners.
struct LearnerLoop::UpdateSums {
  double loss = 0, policy = 0, kl = 0, kl_token = 0, clipped = 0, tokens = 0, row_tokens = 0;  // all-reduced
  double grad_norm = 0;  // this learner's sum of per-update norms (the same on every learner: not reduced)
  void all_reduce(dist::Comm& comm) {
    dist::sum_over_ranks(comm, {&loss, &policy, &kl, &kl_token, &clipped, &tokens, &row_tokens});
  }
};

// How far the learner's old log-probs are from the sampler's (0 up to rounding when both run in
// fp32: the invariant the trace tests check; bf16 sampling shows its rounding here).
struct LearnerLoop::Gap {
  double sum = 0, max = 0, n = 0;
  void add(const torch::Tensor& old_lp, const rl::TraceBatch& batch, const std::vector<Item>& items) {
    auto old_cpu = old_lp.to(torch::kCPU, torch::kFloat32);
    auto old_a = old_cpu.accessor<float, 1>();
    auto tr = batch.target_traj_N.accessor<int64_t, 1>();
    auto rp = batch.target_resp_N.accessor<int64_t, 1>();
    for (int64_t j = 0; j < old_cpu.size(0); ++j) {
      const auto& lps = items[static_cast<size_t>(tr[j])].r->logprobs;
      if (lps.empty()) continue;
      const double d = std::abs(static_cast<double>(old_a[j]) - lps[static_cast<size_t>(rp[j])]);
      sum += d;
      max = std::max(max, d);
      n += 1;
    }
  }
};

namespace {
rl::TraceBatch collate_rows(const std::vector<std::pair<size_t, size_t>>& which,
                            const std::vector<std::vector<rl::TraceRow>>& rows_of_item, torch::Device device,
                            const rl::ScoreOptions& so) {
  std::vector<rl::TraceRow> rows;
  for (auto [i, j] : which) rows.push_back(rows_of_item[i][j]);
  return rl::collate(rows, device, so);
}

MasterWeightsOptions weights_options(const RlRunConfig& cfg, const model::Transformer& master, const dist::Comm& comm,
                                     const LearnerOptions& opts) {
  MasterWeightsOptions o;
  o.compute_dtype = compute_dtype_for(cfg.optim.compute_dtype, master->device(), master->dtype());
  o.optimizer = opts.optimizer;
  o.adam = {cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  o.zero1 = cfg.optim.zero1;
  o.shard = cfg.optim.zero1 ? comm.rank() : 0;
  o.shards = cfg.optim.zero1 ? comm.size() : 1;
  if (opts.zero1_of > 1) {  // rank 0's share, nothing broadcast (a bench's memory measurement)
    DICE_REQUIRE(comm.size() == 1, "LearnerOptions::zero1_of measures one learner; this group has ", comm.size());
    o.zero1 = false;
    o.shard = 0;
    o.shards = opts.zero1_of;
  }
  return o;
}

}  // namespace

LearnerLoop::LearnerLoop(const RlRunConfig& cfg, model::Transformer master, dist::Comm& learners,
                         std::optional<model::Transformer> reference, Options opts)
    : cfg_(cfg),
      weights_(master, weights_options(cfg, master, learners, opts)),
      comm_(learners),
      reference_(std::move(reference)),
      opts_(opts) {
  score_.fast = cfg.optim.fast;
  score_.attn_chunk = cfg.optim.attn_chunk;
  score_.logit_chunk = cfg.optim.logit_chunk;
  score_.checkpoint = cfg.optim.checkpoint_layers;
}

void LearnerLoop::sync_device() const {
  if (opts_.sync_timing && model()->device().is_cuda()) torch::cuda::synchronize();
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

nlohmann::json LearnerLoop::step(const std::vector<Rollout>& mine, double temperature) {
  nlohmann::json m;
  score_.temperature = temperature > 0 ? temperature : cfg_.sampler.temperature;
  const auto dev = model()->device();
  // ---- rows ----
  Timer t_rows;
  rl::TraceOptions to;
  to.block_size = model()->config().block_size;
  to.mask_token_id = model()->config().mask_token_id;
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
  // (host values, one tensor each for the all-reduce: no per-item tensor access)
  std::vector<int64_t> local_sizes = {0, 0};
  for (const auto& it : items) {
    local_sizes[0] = std::max(local_sizes[0], it.r->kept + 1);
    local_sizes[1] = std::max(local_sizes[1], static_cast<int64_t>(it.r->traj.response_ids.size()));
  }
  auto sizes_d = torch::tensor(local_sizes, torch::kInt64).to(comm_.device());
  comm_.all_reduce(sizes_d, dist::ReduceOp::kMax);
  auto sizes = sizes_d.cpu();
  const int64_t K = sizes.data_ptr<int64_t>()[0], L1 = std::max<int64_t>(1, sizes.data_ptr<int64_t>()[1]);
  const int64_t rpu = cfg_.optim.responses_per_update, U = (K + rpu - 1) / rpu;
  std::vector<double> local_targets(static_cast<size_t>(std::max<int64_t>(U, 1)), 0.0);
  for (const auto& it : items) local_targets[static_cast<size_t>(it.r->kept / rpu)] += static_cast<double>(it.targets);
  auto targets_d = torch::tensor(local_targets, torch::kFloat64).to(comm_.device());
  comm_.all_reduce(targets_d);
  auto targets = targets_d.cpu().contiguous();
  const double* targets_of = targets.data_ptr<double>();
  std::vector<std::vector<MicroBatch>> mbs;
  for (int64_t u = 0; u < U; ++u) mbs.push_back(micro_batches(items, u));
  std::vector<std::vector<rl::TraceRow>> rows_of_item;
  for (auto& it : items) rows_of_item.push_back(std::move(it.rows));
  m["time_rows_s"] = t_rows.elapsed_s();

  // ---- old log-probs (and the frozen reference's), before any update ----
  // The first update's own forward gives its old log-probs (run_update); this pass scores the
  // later updates' micro-batches, and every micro-batch on the reference model when there is one.
  weights_.refresh_compute();  // the master may have been changed in place (checkpoint load, weight broadcast)
  sync_device();
  Timer t_old;
  Gap gap;
  int64_t old_row_tokens = 0;
  {
    torch::NoGradGuard ng;
    for (size_t u = 0; u < mbs.size(); ++u) {
      const bool own_old = opts_.reuse_first_forward && u == 0;
      if (own_old && !reference_) continue;
      for (auto& mb : mbs[u]) {
        const auto batch = collate_rows(mb.rows, rows_of_item, dev, score_);
        if (!own_old) {
          mb.old_lp = rl::token_logprobs(compute_model(), batch, score_).detach().to(torch::kFloat32);
          old_row_tokens += batch.rows * batch.row_tokens;
          gap.add(mb.old_lp, batch, items);
        }
        if (reference_) mb.ref_lp = rl::token_logprobs(*reference_, batch, score_).detach();
      }
    }
  }
  sync_device();
  m["time_old_logp_s"] = t_old.elapsed_s();

  // ---- the updates ----
  time_optimizer_ = time_allreduce_ = time_backward_ = 0;
  Timer t_update;
  UpdateSums sums;
  for (int64_t u = 0; u < U; ++u) {
    const int64_t responses = std::min(rpu, K - u * rpu);
    run_update(mbs[static_cast<size_t>(u)], rows_of_item, items, L1, responses, targets_of[u], sums,
               opts_.reuse_first_forward && u == 0, gap);
  }
  if (dev.is_cuda()) torch::cuda::synchronize();
  m["time_update_s"] = t_update.elapsed_s();
  m["time_allreduce_s"] = time_allreduce_;
  m["time_optimizer_s"] = time_optimizer_;

  sums.all_reduce(comm_);
  double old_rows = static_cast<double>(old_row_tokens);
  dist::sum_over_ranks(comm_, {&gap.sum, &gap.n, &old_rows});
  auto gmax = torch::tensor({gap.max}, torch::kFloat64).to(comm_.device());
  comm_.all_reduce(gmax, dist::ReduceOp::kMax);
  const double tokens = sums.tokens;
  m["kept_samples"] = K;
  m["updates"] = U;
  m["padded_response_len"] = L1;
  m["loss"] = sums.loss;  // summed over updates
  m["policy_loss"] = sums.policy;
  m["kl"] = tokens > 0 ? sums.kl_token / tokens : 0.0;
  m["clip_fraction"] = tokens > 0 ? sums.clipped / tokens : 0.0;
  m["target_tokens"] = static_cast<int64_t>(tokens);
  m["row_tokens"] = static_cast<int64_t>(sums.row_tokens);
  m["old_logp_row_tokens"] = static_cast<int64_t>(old_rows);  // scored by the no-grad pass
  m["grad_norm"] = U > 0 ? sums.grad_norm / static_cast<double>(U) : 0.0;
  m["logp_gap_mean"] = gap.n > 0 ? gap.sum / gap.n : 0.0;
  m["logp_gap_max"] = gmax.cpu().item<double>();
  return m;
}

void LearnerLoop::run_update(std::vector<MicroBatch>& mbs, const std::vector<std::vector<rl::TraceRow>>& rows_of_item,
                             const std::vector<Item>& items, int64_t L1, int64_t responses, double targets,
                             UpdateSums& sums, bool own_old, Gap& gap) {
  auto& cm = compute_model();
  weights_.zero_grads();
  const auto& norm = cfg_.loss.norm;
  for (auto& mb : mbs) {
    const auto batch = collate_rows(mb.rows, rows_of_item, model()->device(), score_);
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
    auto dev = model()->device();
    auto lp = rl::token_logprobs(cm, batch, score_);
    if (own_old) {  // no optimizer step yet in this step: these are the old log-probs
      mb.old_lp = lp.detach().to(torch::kFloat32);
      gap.add(mb.old_lp, batch, items);
    }
    auto out = rl::tracerl_loss(lp, mb.old_lp, mb.ref_lp, torch::tensor(adv, torch::kFloat64).to(dev),
                                torch::tensor(w, torch::kFloat64).to(dev), cfg_.loss);
    out.loss.backward();
    weights_.accumulate();  // this micro-batch's gradients into the fp32 buffer
    sums.loss += out.loss.item<double>();
    sums.policy += out.policy_sum;
    sums.kl += out.kl_sum;
    sums.kl_token += out.kl_token_sum;
    sums.clipped += static_cast<double>(out.clipped);
    sums.tokens += static_cast<double>(out.tokens);
    sums.row_tokens += static_cast<double>(batch.rows * batch.row_tokens);
  }
  sync_device();
  Timer t_ar;
  if (comm_.size() > 1) {
    RECORD_USER_SCOPE("dice::allreduce");
    weights_.all_reduce(comm_);  // every gradient at once (one buffer)
  }
  sync_device();
  time_allreduce_ += t_ar.elapsed_s();
  Timer t_opt;
  {
    RECORD_USER_SCOPE("dice::optimizer");
    sums.grad_norm += weights_.clip(cfg_.optim.grad_clip);
    if (weights_.has_optimizer()) {
      weights_.step(cfg_.optim.lr, comm_, cfg_.dist.bucket_mb << 20);
      weights_.refresh_compute();
    }
  }
  sync_device();
  time_optimizer_ += t_opt.elapsed_s();
}

}  // namespace dice::train
