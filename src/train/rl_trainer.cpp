// RlTrainer: setup, the stage/step loop, rollout transfer, weight sync, checkpoints, metrics.
#include "dice/train/rl_trainer.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <cstring>
#include <filesystem>
#include <optional>

#include "dice/ckpt/checkpoint.h"
#include "dice/ckpt/hf.h"
#include "dice/config/config.h"
#include "dice/dist/comm.h"
#include "dice/model/config.h"
#include "dice/model/safetensors.h"
#include "dice/rl/curriculum.h"
#include "dice/text/tokenizer.h"
#include "dice/train/actor_loop.h"
#include "dice/train/learner_loop.h"
#include "dice/train/model_source.h"
#include "dice/train/run_context.h"
#include "dice/train/run_plan.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/run_dir.h"
#include "dice/util/timer.h"

namespace dice::train {
namespace {
using nlohmann::json;

// ---- setup helpers ----

void make_dirs(const std::string& dir) { std::filesystem::create_directories(dir); }

// ---- per-step helpers ----

std::vector<torch::Tensor> params_of(model::Transformer& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m->named_parameters()) out.push_back(p.value());
  return out;
}

// Rollouts to their learners (kept index mod learners): every actor sends each learner its share
// (a size, then the packed tensor), learners receive from every actor in order.
std::vector<Rollout> transfer_rollouts(dist::Comm& world_comm, const std::vector<Rollout>& mine, bool is_actor,
                                       int num_learners, int world_size) {
  std::vector<Rollout> got;
  const int num_actors = world_size - num_learners;
  if (is_actor) {
    for (int l = 0; l < num_learners; ++l) {
      std::vector<Rollout> share;
      for (const auto& r : mine)
        if (r.kept >= 0 && r.kept % num_learners == l) share.push_back(r);
      auto packed = pack_rollouts(share).to(world_comm.device());
      auto n = torch::tensor({packed.numel()}, torch::kInt64).to(world_comm.device());
      world_comm.send(n, l);
      world_comm.send(packed, l);
    }
  } else {
    for (int a = 0; a < num_actors; ++a) {
      auto n = torch::zeros({1}, torch::kInt64).to(world_comm.device());
      world_comm.recv(n, num_learners + a);
      auto packed = torch::zeros({n.cpu().item<int64_t>()}, torch::kInt64).to(world_comm.device());
      world_comm.recv(packed, num_learners + a);
      for (auto& r : unpack_rollouts(packed)) got.push_back(std::move(r));
    }
    std::sort(got.begin(), got.end(), [](const Rollout& a, const Rollout& b) { return a.kept < b.kept; });
  }
  return got;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, q * (v.size() - 1) + 0.5))];
}

// Rank 0: one record from every rank's part.
json merge_metrics(const std::vector<std::string>& parts, int64_t step, const std::string& stage, int64_t version) {
  json rec = {{"step", step}, {"stage", stage}, {"policy_version", version}};
  json actor0, learner0;
  std::map<std::string, double> times, sums;
  std::map<std::string, int64_t> failures, eval_failures;
  std::map<std::string, double> eval;  // summed over actors
  std::vector<double> compile_s, exec_s, latency_s;
  json checks_learner = json::array(), checks_learner_cast = json::array(), checks_actor = json::array();
  bool have_actor = false, have_learner = false;
  for (const auto& p : parts) {
    auto j = json::parse(p);
    for (auto& [k, v] : j["times"].items()) times[k] = std::max(times[k], v.get<double>());
    for (const char* k : {"weight_sync_bytes", "weight_sync_gbps"})
      if (j.contains(k)) rec[k] = j[k];
    if (j.contains("actor")) {
      auto& a = j["actor"];
      if (!have_actor) actor0 = a, have_actor = true;
      for (const char* k : {"response_tokens", "judged", "compiled", "correct", "extracted", "static_findings",
                            "judge_cache_hits", "judge_reused"})
        if (a.contains(k)) sums[k] += a[k].get<double>();
      if (a.contains("failures"))
        for (auto& [k, v] : a["failures"].items()) failures[k] += v.get<int64_t>();
      if (a.contains("judge_compile_s")) for (double x : a["judge_compile_s"]) compile_s.push_back(x);
      if (a.contains("judge_exec_s")) for (double x : a["judge_exec_s"]) exec_s.push_back(x);
      if (a.contains("judge_latency_s")) for (double x : a["judge_latency_s"]) latency_s.push_back(x);
      for (const char* k : {"judge_batches", "judge_queue_max"})
        if (a.contains(k)) sums[k] += a[k].get<double>();
      if (j.contains("checksum_actor")) checks_actor.push_back(j["checksum_actor"]);
    }
    if (j.contains("eval")) {
      for (const char* k : {"samples", "correct", "compiled", "fast_1"}) eval[k] += j["eval"].value(k, 0.0);
      for (auto& [k, v] : j["eval"]["failures"].items()) eval_failures[k] += v.get<int64_t>();
    }
    if (j.contains("learner")) {
      if (!have_learner) learner0 = j["learner"], have_learner = true;
      if (j.contains("checksum_learner")) checks_learner.push_back(j["checksum_learner"]);
      if (j.contains("checksum_learner_cast")) checks_learner_cast.push_back(j["checksum_learner_cast"]);
    }
  }
  for (auto& [k, v] : actor0["step"].items()) rec[k] = v;
  for (const char* k : {"loss", "policy_loss", "kl", "clip_fraction", "grad_norm", "updates", "target_tokens",
                        "row_tokens", "padded_response_len", "logp_gap_mean", "logp_gap_max"})
    if (learner0.contains(k)) rec[k] = learner0[k];
  for (auto& [k, v] : sums) rec[k] = v;
  if (sums.count("judged") && sums["judged"] > 0) {
    rec["pass_rate"] = sums["correct"] / sums["judged"];
    rec["compile_rate"] = sums["compiled"] / sums["judged"];
    rec["judge_compile_p50_s"] = percentile(compile_s, 0.5);
    rec["judge_compile_p90_s"] = percentile(compile_s, 0.9);
    rec["judge_exec_p50_s"] = percentile(exec_s, 0.5);
    rec["judge_exec_p90_s"] = percentile(exec_s, 0.9);
    rec["judge_latency_p50_s"] = percentile(latency_s, 0.5);  // submit (sequence finished) -> verdict
    rec["judge_latency_p90_s"] = percentile(latency_s, 0.9);
    rec["failures"] = failures;
  }
  if (eval["samples"] > 0) {
    rec["eval_samples"] = static_cast<int64_t>(eval["samples"]);
    rec["eval_pass_rate"] = eval["correct"] / eval["samples"];
    rec["eval_compile_rate"] = eval["compiled"] / eval["samples"];
    rec["eval_fast_1"] = eval["fast_1"] / eval["samples"];
    rec["eval_failures"] = eval_failures;
  }
  for (auto& [k, v] : times) rec[k] = v;
  if (times.count("time_sample_s") && times["time_sample_s"] > 0)
    rec["sample_tokens_per_s"] = sums["response_tokens"] / times["time_sample_s"];
  if (times.count("time_update_s") && times["time_update_s"] > 0 && learner0.contains("row_tokens"))
    rec["learner_row_tokens_per_s"] = learner0["row_tokens"].get<double>() / times["time_update_s"];
  rec["checksums"] = {{"learners", checks_learner}, {"learners_as_actor_dtype", checks_learner_cast},
                      {"actors", checks_actor}};
  return rec;
}

std::string progress_line(const json& r, int64_t total) {
  char buf[512];
  auto g = [&](const char* k) { return r.contains(k) ? r[k].get<double>() : 0.0; };
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld [%s] reward %.3f±%.3f kept %lld/%lld loss %+.4g kl %.2e clip %.2f gnorm %.3g | "
                "sample %.1fs judge %.1fs update %.1fs sync %.2fs ckpt %.1fs",
                static_cast<long long>(r["step"].get<int64_t>()), static_cast<long long>(total),
                r["stage"].get<std::string>().c_str(), g("reward_mean"), g("reward_std"),
                static_cast<long long>(g("kept_samples")), static_cast<long long>(g("samples")), g("loss"), g("kl"),
                g("clip_fraction"), g("grad_norm"), g("time_sample_s"), g("time_judge_s"), g("time_update_s"),
                g("time_weight_sync_s"), g("time_checkpoint_s"));
  std::string s = buf;
  if (r.contains("pass_rate")) s += str(" | pass ", g("pass_rate"), " compile ", g("compile_rate"));
  return s;
}

std::string rng_state_bytes() {
  auto st = at::detail::getDefaultCPUGenerator().get_state();
  return std::string(reinterpret_cast<const char*>(st.data_ptr()), static_cast<size_t>(st.numel()));
}

void set_rng_state_bytes(const std::string& b) {
  if (b.empty()) return;
  auto t = torch::empty({static_cast<int64_t>(b.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), b.data(), b.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(t);
}

// One `dice train` invocation on this rank: the setup in the constructor, then run().
class Run {
 public:
  Run(const RlRunConfig& cfg, const std::string& resume, const std::string& yaml, const dist::World& world);
  TrainResult run();

 private:
  void step(const StageData& st, int64_t stage_start, int64_t stage_end);
  ActorOutput act(const StageData& st, const std::vector<int64_t>& slots, json& part);
  std::vector<Rollout> transfer(const ActorOutput& rollouts, json& part);
  void learn(const std::vector<Rollout>& mine, double temperature, json& part);
  void sync_weights(json& part);
  void record_checksums(json& part);
  void evaluate(json& part);
  std::string checkpoint(const StageData& st, int64_t next_cursor);
  void report(const StageData& st, const ActorOutput& rollouts, const json& part, const std::string& saved);

  const RlRunConfig& cfg_;
  const dist::World& world_;
  bool colocated_, is_learner_, is_actor_;
  bool shared_actor_ = false;  // colocated: the actor samples with the learner's compute copy
  int num_learners_, role_rank_ = 0;
  RunContext ctx_;  // model, tokenizer, device, run directory, metrics
  Timer clock_;     // since this start's first step (the ETA)
  torch::Dtype actor_dtype_ = torch::kFloat32;
  std::vector<StageData> stages_;
  std::optional<StageData> eval_;  // eval.every: the evaluation's tasks and prompts
  ckpt::TrainState state_;
  std::optional<model::Transformer> master_, actor_model_, reference_;
  std::unique_ptr<dist::Comm> role_comm_, world_comm_, sync_comm_;
  dist::SubComm sync_mpi_;  // learner 0 + the actors (split roles)
  std::optional<LearnerLoop> learner_;
  std::optional<ActorLoop> actor_;
  int64_t step_ = 0, version_ = 0;
  TrainResult result_;
};

Run::Run(const RlRunConfig& cfg, const std::string& resume, const std::string& yaml, const dist::World& world)
    // the config is validated before ctx_ looks at the model
    : cfg_((cfg.validate(), cfg)), world_(world), ctx_(cfg.model, cfg.device, world) {
  colocated_ = world.role() == dist::Role::kColocated;
  is_learner_ = world.role() != dist::Role::kActor;
  is_actor_ = world.role() != dist::Role::kLearner;
  num_learners_ = colocated_ ? world.size() : cfg.dist.num_learners;
  role_rank_ = world.role_rank();

  // ---- everything a user can get wrong is refused here, before any work (the model, its
  // tokenizer and the device in ctx_) ----
  const auto& mcfg = ctx_.model_config();
  const auto& tok = ctx_.tokenizer();
  for (const auto& s : cfg.stages) stages_.push_back(load_stage(s, tok));
  if (cfg.eval.every > 0) {
    StageConfig ec;
    ec.name = "eval";
    ec.kind = cfg.eval.kind;
    ec.answer = cfg.eval.answer;
    ec.tasks = cfg.eval.tasks;
    ec.max_prompt_len = cfg.eval.max_prompt_len;
    ec.prompt_template = cfg.eval.prompt_template;
    eval_ = load_stage(ec, tok);
    const auto n = static_cast<size_t>(cfg.eval.max_tasks);
    if (n > 0 && n < eval_->tasks.size()) {
      eval_->tasks.resize(n);
      eval_->prompt_ids.resize(n);
      eval_->prompts.resize(n);
    }
  }
  const int64_t W = mcfg.block_size;
  std::vector<const StageData*> sampled;
  for (const auto& st : stages_) sampled.push_back(&st);
  if (eval_) sampled.push_back(&*eval_);
  for (const StageData* stp : sampled) {
    const StageData& st = *stp;
    int64_t longest = 0;
    for (const auto& p : st.prompt_ids)
      if (static_cast<int64_t>(p.size()) <= st.cfg.max_prompt_len) longest = std::max<int64_t>(longest, p.size());
    const int64_t need = (longest + cfg.sampler.max_new_tokens + W - 1) / W * W;
    DICE_REQUIRE(need <= cfg.sampler.max_len, "stage '", st.cfg.name, "': prompts of up to ", longest,
                 " tokens plus sampler.max_new_tokens ", cfg.sampler.max_new_tokens, " need sampler.max_len >= ", need,
                 " (it is ", cfg.sampler.max_len, ").");
  }
  ctx_.plan(cfg.out, resume, yaml, key_affects_results);
  const torch::Device device = ctx_.device();
  actor_dtype_ = default_dtype(device);
  const std::string& weights_src = ctx_.start_dir();
  const auto start_weights = ctx_.start_weights();
  if (ctx_.resuming()) state_ = ckpt::load_state(ctx_.resume_from());

  // ---- models: fp32 master weights on learners, the actors' copy in their dtype ----
  if (is_learner_) {
    master_.emplace(mcfg, torch::kFloat32, device);
    load_into(*master_, start_weights, weights_src);
    if (cfg.loss.kl_reference == "initial") {
      reference_.emplace(mcfg, torch::kFloat32, device);
      load_into(*reference_, load_weights(ctx_.model()), ctx_.model().dir);
      for (auto& p : (*reference_)->parameters()) p.set_requires_grad(false);
    }
  }

  // ---- communicators: the role's ranks; with split roles also all ranks (rollouts) and
  // learner 0 + the actors (weights) ----
  auto opts = [&](const char* name) { return dist::CommOptions{name, dist::role_name(world.role()), cfg.dist.timeout_s}; };
  role_comm_ = dist::make_comm(world.role_comm(), device, opts(colocated_ ? "ranks" : is_learner_ ? "learners" : "actors"));
  if (!colocated_) {
    world_comm_ = dist::make_comm(world.comm(), device, opts("world"));
    sync_mpi_ = dist::SubComm::split(world.comm(), world.rank() == 0 || is_actor_, world.rank());
    if (sync_mpi_.member()) sync_comm_ = dist::make_comm(sync_mpi_.comm(), device, opts("weights"));
  }
  if (is_learner_) learner_.emplace(cfg, *master_, *role_comm_, reference_);
  // A colocated rank samples with the learner's own compute copy when it is in the actor's dtype
  // (bf16 on CUDA, the fp32 master on CPU): the phases alternate, and the weight sync refreshes it
  // in place. One copy of the weights fewer (16.4 GB a rank at 8B); else the actor keeps its own.
  shared_actor_ = colocated_ && learner_->compute_model()->dtype() == actor_dtype_;
  if (shared_actor_) {
    actor_model_ = learner_->compute_model();
  } else if (is_actor_) {
    actor_model_.emplace(mcfg, actor_dtype_, device);
    load_into(*actor_model_, start_weights, weights_src);
    for (auto& p : (*actor_model_)->parameters()) p.set_requires_grad(false);
  }
  if (is_actor_) actor_.emplace(cfg, *actor_model_, tok, *role_comm_);
  if (is_learner_ && ctx_.resuming())
    learner_->optimizer().load(ckpt::load_optim(ctx_.resume_from(), cfg.optim.zero1 ? role_rank_ : 0));
  if (ctx_.resuming() && state_.rng.count(world.rank())) set_rng_state_bytes(state_.rng.at(world.rank()));

  ctx_.open_outputs(state_.step);
  if (world.is_root()) {
    if (cfg.rollout.write_rollouts) make_dirs(cfg.out + "/rollouts");
    log::info("train: ", world.size(), " rank(s): ",
              colocated_ ? (shared_actor_ ? "colocated (sampling on the learner's weights)" : "colocated")
                         : str(num_learners_, " learner(s) + ", world.size() - num_learners_, " actor(s)"),
              " on ", device.str(), "; ", cfg.total_steps(), " steps in ", stages_.size(), " stage(s); ",
              ctx_.resuming() ? "resuming from " + ctx_.resume_from() : std::string("fresh start"));
  }
  step_ = state_.step;
  version_ = state_.policy_version;
  world.barrier();
}

TrainResult Run::run() {
  result_.first_step = step_ + 1;
  clock_.reset();
  int64_t stage_start = 0;
  for (const auto& st : stages_) {
    const int64_t stage_end = stage_start + st.cfg.steps;
    while (step_ < stage_end) step(st, stage_start, stage_end);  // stages already done are skipped
    stage_start = stage_end;
  }
  world_.barrier();
  return result_;
}

// One RL step: the phases in order; each records its time in `part` (this rank's metrics).
void Run::step(const StageData& st, int64_t stage_start, int64_t stage_end) {
  ++step_;
  inject_fault(cfg_.fault, step_, world_);
  Timer t_step;
  json part = {{"rank", world_.rank()}, {"times", json::object()}};
  const int64_t cursor = (step_ - stage_start - 1) * cfg_.rollout.tasks_per_step;
  const rl::Curriculum curriculum(static_cast<int64_t>(st.tasks.size()), cfg_.rollout.tasks_per_step,
                                  cfg_.rollout.curriculum, cfg_.sampler.seed);

  ActorOutput rollouts = act(st, curriculum.tasks_at(cursor), part);  // sample, score, advantages
  std::vector<Rollout> mine = transfer(rollouts, part);                // kept rollouts -> learners
  learn(mine, cfg_.temperature_of(st.cfg), part);                     // rows, old log-probs, updates
  ++version_;
  sync_weights(part);                                                  // new weights -> actors
  record_checksums(part);
  if (cfg_.eval.every > 0 && step_ % cfg_.eval.every == 0) evaluate(part);  // the new policy, judged
  Timer t_ckpt;
  std::string saved;
  if (step_ % cfg_.ckpt.every == 0 || (cfg_.ckpt.stage_end && step_ == stage_end))
    saved = checkpoint(st, cursor + cfg_.rollout.tasks_per_step);
  if (is_learner_) part["times"]["time_checkpoint_s"] = t_ckpt.elapsed_s();
  part["times"]["time_step_s"] = t_step.elapsed_s();
  report(st, rollouts, part, saved);                                   // metrics, rollouts, progress
}

ActorOutput Run::act(const StageData& st, const std::vector<int64_t>& slots, json& part) {
  ActorOutput out;
  if (!is_actor_) return out;
  out = actor_->step(st, slots, step_);
  for (const char* k : {"time_sample_s", "time_judge_s", "time_advantage_s"}) part["times"][k] = out.metrics[k];
  part["actor"] = out.metrics;
  if (colocated_) actor_->release();  // the KV cache is not needed during the update
  return out;
}

std::vector<Rollout> Run::transfer(const ActorOutput& rollouts, json& part) {
  if (colocated_) return rollouts.mine;
  Timer t;
  auto mine = transfer_rollouts(*world_comm_, rollouts.mine, is_actor_, num_learners_, world_.size());
  // Reported by the senders: a learner's wait here is the actors' sampling, not transfer.
  if (is_actor_) part["times"]["time_transfer_s"] = t.elapsed_s();
  return mine;
}

void Run::learn(const std::vector<Rollout>& mine, double temperature, json& part) {
  if (!is_learner_) return;
  auto lm = learner_->step(mine, temperature);
  for (const char* k : {"time_rows_s", "time_old_logp_s", "time_update_s"}) part["times"][k] = lm[k];
  part["learner"] = lm;
}

// In place, so the sampler's packed weights and CUDA graphs stay valid.
void Run::sync_weights(json& part) {
  Timer t;
  int64_t bytes = 0;
  if (shared_actor_) {
    learner_->weights().refresh_compute();  // the actor's weights are the learner's compute copy
  } else if (colocated_) {
    torch::NoGradGuard ng;
    auto src = learner_->params();
    auto dst = params_of(*actor_model_);
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  } else if (sync_comm_) {
    auto ps = is_actor_ ? params_of(*actor_model_) : learner_->params();
    bytes = dist::broadcast_parameters(*sync_comm_, ps, 0, actor_dtype_, cfg_.dist.bucket_mb << 20);
    // The stamp: the policy version the weights belong to, checked by every actor.
    auto stamp = torch::tensor({version_}, torch::kInt64).to(sync_comm_->device());
    sync_comm_->broadcast(stamp, 0);
    const int64_t got = stamp.cpu().item<int64_t>();
    DICE_CHECK(got == version_, "weight sync: received policy version ", got, ", expected ", version_);
  }
  if (ctx_.device().is_cuda()) torch::cuda::synchronize();
  const double s = t.elapsed_s();
  if (is_learner_) part["times"]["time_weight_sync_s"] = s;  // actors would report their wait for the update
  if (bytes > 0 && world_.is_root()) {
    part["weight_sync_bytes"] = bytes;
    part["weight_sync_gbps"] = static_cast<double>(bytes) / std::max(s, 1e-9) / 1e9;
  }
}

// eval.every: the actors sample and judge the evaluation tasks with the weights this step made.
void Run::evaluate(json& part) {
  if (!is_actor_) return;
  Timer t;
  part["eval"] = actor_->evaluate(*eval_, cfg_.eval.samples, step_);
  if (colocated_) actor_->release();
  part["times"]["time_eval_s"] = t.elapsed_s();
}

// With dist.checksum_weights: every rank's checksum goes into the metrics, and every actor checks
// its weights against learner 0's (a mismatch ends the job: actors would sample another policy).
void Run::record_checksums(json& part) {
  if (!cfg_.dist.checksum_weights) return;
  std::string cast;
  if (is_learner_) {
    part["checksum_learner"] = dist::parameters_checksum(learner_->params(), torch::kFloat32);
    part["checksum_learner_cast"] = cast = dist::parameters_checksum(learner_->params(), actor_dtype_);
  }
  std::string mine;
  if (is_actor_) part["checksum_actor"] = mine = dist::parameters_checksum(params_of(*actor_model_), actor_dtype_);
  if (colocated_) {
    DICE_CHECK(mine == cast, "weight sync: actor checksum ", mine, " != learner checksum ", cast);
  } else if (sync_comm_) {
    auto c = torch::tensor({static_cast<int64_t>(std::stoull(world_.is_root() ? cast : mine, nullptr, 16))},
                           torch::kInt64).to(sync_comm_->device());
    sync_comm_->broadcast(c, 0);
    if (is_actor_)
      DICE_CHECK(static_cast<uint64_t>(c.cpu().item<int64_t>()) == std::stoull(mine, nullptr, 16),
                 "weight sync: actor weights (checksum ", mine, ") differ from learner 0's after the broadcast");
  }
}

// Every rank hands in its RNG state; the learners write (ckpt::save_checkpoint's protocol).
std::string Run::checkpoint(const StageData& st, int64_t next_cursor) {
  auto rngs = world_.gather(rng_state_bytes());
  if (!is_learner_) return "";
  ckpt::TrainState ts;
  ts.step = step_;
  ts.stage = st.cfg.name;
  ts.cursor = next_cursor;
  ts.policy_version = version_;
  for (size_t r = 0; r < rngs.size(); ++r) ts.rng[static_cast<int>(r)] = rngs[r];
  ts.config_yaml = ctx_.yaml();
  const auto so = learner_save_options(*role_comm_, role_rank_, role_rank_ == 0, cfg_.ckpt.keep_last,
                                       ctx_.model().dir, ctx_.side_files());
  return learner_->weights().save_checkpoint(cfg_.out, ts, so);
}

// Rank 0 (learner 0) merges every rank's part into one metrics record and prints the progress line.
void Run::report(const StageData& st, const ActorOutput& rollouts, const json& part, const std::string& saved) {
  auto parts = world_.gather(part.dump());
  std::vector<std::string> roll_parts;
  if (cfg_.rollout.write_rollouts) {
    json lines = json::array();
    for (size_t i = 0; i < rollouts.mine.size(); ++i) {
      const auto& r = rollouts.mine[i];
      json line = {{"step", step_}, {"sample", r.sample}, {"task_id", st.tasks[static_cast<size_t>(r.task)].id},
                   {"reward", r.reward}, {"advantage", r.traj.advantage}, {"kept", r.kept},
                   {"prompt_tokens", r.traj.prompt_ids.size()}, {"response_ids", r.traj.response_ids},
                   {"step_map", r.traj.step_map}, {"stop_token", r.stop_token}, {"policy_version", version_ - 1}};
      if (i < rollouts.details.size()) line.update(rollouts.details[i]);  // response, code, verdict
      lines.push_back(std::move(line));
    }
    // a sampled response may cut a multi-byte character: invalid UTF-8 becomes U+FFFD in the file
    roll_parts = world_.gather(lines.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (!saved.empty()) result_.last_checkpoint = saved;
  result_.last_step = step_;
  if (!world_.is_root()) return;
  auto rec = merge_metrics(parts, step_, st.cfg.name, version_);
  if (!saved.empty()) rec["checkpoint"] = saved;
  ctx_.metrics().write(rec);
  if (cfg_.rollout.write_rollouts) {
    std::string text;
    for (const auto& p : roll_parts)
      for (const auto& l : json::parse(p)) text += l.dump() + "\n";
    fs::write_file_atomic(cfg_.out + "/rollouts/" + ckpt::step_dir_name(step_) + ".jsonl", text);
  }
  const int64_t first = result_.first_step;
  log::info(progress_line(rec, cfg_.total_steps()), " | ",
            log::eta(clock_.elapsed_s(), static_cast<long>(step_ - first + 1),
                     static_cast<long>(cfg_.total_steps() - first + 1)));
  result_.reward_mean.push_back(rec.value("reward_mean", 0.0));
}

}  // namespace

TrainResult run_train(const RlRunConfig& cfg, const std::string& resume, const std::string& yaml,
                      const dist::World& world) {
  Run r(cfg, resume, yaml, world);
  return r.run();
}

}  // namespace dice::train
