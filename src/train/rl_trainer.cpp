// RlTrainer: setup, the stage/step loop, rollout transfer, weight sync, checkpoints, metrics.
#include "dice/train/rl_trainer.h"

#include <signal.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <cstring>
#include <filesystem>
#include <optional>

#include "dice/ckpt/checkpoint.h"
#include "dice/config/config.h"
#include "dice/dist/comm.h"
#include "dice/model/config.h"
#include "dice/model/safetensors.h"
#include "dice/rl/curriculum.h"
#include "dice/text/tokenizer.h"
#include "dice/train/actor_loop.h"
#include "dice/train/learner_loop.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::train {
namespace {
using nlohmann::json;
namespace stdfs = std::filesystem;

// ---- setup helpers ----

torch::Device pick_device(const std::string& want, const dist::World& world) {
  const bool cuda = torch::cuda::is_available();
  DICE_REQUIRE(want != "cuda" || cuda, "device is 'cuda' but no CUDA device is visible.");
  if (want == "cpu" || !cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.device_index(torch::cuda::device_count())));
}

// The folder with config.json + tokenizer files of the starting model (an HF folder or checkpoint).
std::string model_dir_of(const std::string& model) {
  DICE_REQUIRE(fs::exists(model), "The model '", model, "' does not exist (model: an HF folder or a checkpoint).");
  DICE_REQUIRE(fs::exists(model + "/config.json"), "The model folder '", model, "' has no config.json.");
  return model;
}

model::NamedTensors initial_weights(const std::string& dir) {
  if (fs::exists(dir + "/model.h5")) return ckpt::load_model(dir);
  return model::load_safetensors(dir);
}

// Loads weights into a model, turning a shape mismatch into a sentence naming the source.
void load_into(model::Transformer& m, const model::NamedTensors& w, const std::string& source) {
  try {
    torch::NoGradGuard ng;
    m->load_weights(w);
  } catch (const Error& e) {
    throw Error(str("The weights in ", source, " do not fit the run's model (", m->config().num_hidden_layers,
                    " layers, hidden ", m->config().hidden_size, "): ", e.what(),
                    " Is it a checkpoint of another model?"));
  }
}

void make_dirs(const std::string& dir) { std::filesystem::create_directories(dir); }

void append_line(const std::string& path, const std::string& line) {
  std::ofstream f(path, std::ios::app);
  f << line << "\n";
  f.flush();
  DICE_REQUIRE(f.good(), "Could not append to ", path, ".");
}

// Rank 0 checks the run directory against this config; every rank gets the verdict.
// Returns the checkpoint to resume from ("" = fresh start).
std::string plan_run_dir(const RlRunConfig& cfg, const std::string& resume, const std::string& yaml,
                         const dist::World& world) {
  std::string verdict;  // "ok:<ckpt>" or "error:<sentence>"
  if (world.is_root()) {
    try {
      const std::string recorded = cfg.out + "/config.yaml";
      std::string ckpt_dir;
      if (resume == "auto") ckpt_dir = ckpt::find_latest_complete(cfg.out).value_or("");
      else if (resume != "never") {
        DICE_REQUIRE(ckpt::check_checkpoint(resume).empty(), "--resume ", resume, " is not a complete checkpoint: ",
                     ckpt::check_checkpoint(resume)[0]);
        ckpt_dir = resume;
      }
      if (resume == "never" && ckpt::find_latest_complete(cfg.out, false))
        throw Error(str("The run directory ", cfg.out, " already holds checkpoints; continue it with --resume auto ",
                        "or pick another --out."));
      if (fs::exists(recorded)) {
        std::vector<std::string> bad;
        for (const auto& k : config_differences(fs::read_file(recorded), yaml))
          if (key_affects_results(k)) bad.push_back(k);
        if (!bad.empty()) {
          std::string keys;
          for (size_t i = 0; i < bad.size() && i < 12; ++i) keys += (i ? ", " : "") + bad[i];
          throw Error(str("The run directory ", cfg.out, " was recorded with a different config (", keys,
                          bad.size() > 12 ? ", ..." : "", "): resuming would mix two experiments. Use the recorded ",
                          "config (", recorded, ") or a new --out."));
        }
      }
      verdict = "ok:" + ckpt_dir;
    } catch (const Error& e) {
      verdict = std::string("error:") + e.what();
    }
  }
  verdict = world.broadcast(verdict);
  if (verdict.rfind("error:", 0) == 0) throw Error(verdict.substr(6));
  return verdict.substr(3);
}

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
  std::map<std::string, int64_t> failures;
  std::vector<double> compile_s, exec_s;
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
                            "judge_cache_hits"})
        if (a.contains(k)) sums[k] += a[k].get<double>();
      if (a.contains("failures"))
        for (auto& [k, v] : a["failures"].items()) failures[k] += v.get<int64_t>();
      if (a.contains("judge_compile_s")) for (double x : a["judge_compile_s"]) compile_s.push_back(x);
      if (a.contains("judge_exec_s")) for (double x : a["judge_exec_s"]) exec_s.push_back(x);
      if (j.contains("checksum_actor")) checks_actor.push_back(j["checksum_actor"]);
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
    rec["failures"] = failures;
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

void keep_metrics_through(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::string kept;
  fs::for_each_line(path, [&](int, const std::string& line) {
    if (json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
  });
  fs::write_file_atomic(path, kept);
}

void maybe_die(const FaultConfig& f, int64_t step, int rank) {
  if (f.kill_at_step != step || f.rank != rank) return;
  if (!f.once_file.empty()) {
    if (fs::exists(f.once_file)) return;
    fs::write_file_atomic(f.once_file, "killed at step " + std::to_string(step) + "\n");
  }
  const bool stop = f.signal == "stop";
  std::fprintf(stderr, "dice: fault injection: rank %d %s itself at step %lld\n", rank, stop ? "stops" : "kills",
               static_cast<long long>(step));
  std::fflush(stderr);
  ::raise(stop ? SIGSTOP : SIGKILL);
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

}  // namespace

TrainResult run_train(const RlRunConfig& cfg, const std::string& resume, const std::string& yaml,
                      const dist::World& world) {
  cfg.validate();
  TrainResult result;
  const bool colocated = world.role() == dist::Role::kColocated;
  const bool is_learner = world.role() != dist::Role::kActor, is_actor = world.role() != dist::Role::kLearner;
  const int num_learners = colocated ? world.size() : cfg.dist.num_learners;
  int role_rank = 0;
  MPI_Comm_rank(world.role_comm(), &role_rank);

  // ---- setup: everything a user can get wrong is refused here, before any work ----
  const std::string model_dir = model_dir_of(cfg.model);
  auto mcfg = model::ModelConfig::from_hf_dir(model_dir);
  auto tok = text::Tokenizer::from_dir(model_dir);
  text::check_compatible(tok, mcfg.vocab_size, mcfg.mask_token_id);
  std::vector<StageData> stages;
  for (const auto& s : cfg.stages) stages.push_back(load_stage(s, tok));
  const int64_t W = mcfg.block_size;
  for (const auto& st : stages) {
    int64_t longest = 0;
    for (const auto& p : st.prompt_ids)
      if (static_cast<int64_t>(p.size()) <= st.cfg.max_prompt_len) longest = std::max<int64_t>(longest, p.size());
    const int64_t need = (longest + cfg.sampler.max_new_tokens + W - 1) / W * W;
    DICE_REQUIRE(need <= cfg.sampler.max_len, "stage '", st.cfg.name, "': prompts of up to ", longest,
                 " tokens plus sampler.max_new_tokens ", cfg.sampler.max_new_tokens, " need sampler.max_len >= ", need,
                 " (it is ", cfg.sampler.max_len, ").");
  }
  const std::string resume_from = plan_run_dir(cfg, resume, yaml, world);
  const auto device = pick_device(cfg.device, world);
  const auto actor_dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;

  ckpt::TrainState state;
  const auto start_weights = initial_weights(resume_from.empty() ? model_dir : resume_from);
  if (!resume_from.empty()) state = ckpt::load_state(resume_from);
  const std::string weights_src = resume_from.empty() ? model_dir : resume_from;

  // ---- models and communicators ----
  std::optional<model::Transformer> master, actor_model, reference;
  if (is_learner) {
    master.emplace(mcfg, torch::kFloat32, device);
    load_into(*master, start_weights, weights_src);
    if (cfg.loss.kl_reference == "initial") {
      reference.emplace(mcfg, torch::kFloat32, device);
      load_into(*reference, initial_weights(model_dir), model_dir);
      for (auto& p : (*reference)->parameters()) p.set_requires_grad(false);
    }
  }
  if (is_actor) {
    actor_model.emplace(mcfg, actor_dtype, device);
    load_into(*actor_model, start_weights, weights_src);
    for (auto& p : (*actor_model)->parameters()) p.set_requires_grad(false);
  }
  const dist::CommOptions copt{"", dist::role_name(world.role()), cfg.dist.timeout_s};
  auto named = [&](const char* n) { auto o = copt; o.name = n; return o; };
  auto role_comm = dist::make_comm(world.role_comm(), device, named(colocated ? "ranks" : is_learner ? "learners" : "actors"));
  std::unique_ptr<dist::Comm> world_comm, sync_comm;
  MPI_Comm sync_mpi = MPI_COMM_NULL;
  if (!colocated) {
    world_comm = dist::make_comm(world.comm(), device, named("world"));
    const int color = (world.rank() == 0 || is_actor) ? 0 : MPI_UNDEFINED;
    MPI_Comm_split(world.comm(), color, world.rank(), &sync_mpi);
    if (sync_mpi != MPI_COMM_NULL) sync_comm = dist::make_comm(sync_mpi, device, named("weights"));
  }
  std::optional<LearnerLoop> learner;
  std::optional<ActorLoop> actor;
  if (is_learner) learner.emplace(cfg, *master, *role_comm, reference);
  if (is_actor) actor.emplace(cfg, *actor_model, tok, *role_comm);
  if (is_learner && !resume_from.empty()) {
    const int optim_rank = cfg.optim.zero1 ? role_rank : 0;
    learner->optimizer().load(ckpt::load_optim(resume_from, optim_rank));
  }
  if (!resume_from.empty() && state.rng.count(world.rank())) set_rng_state_bytes(state.rng.at(world.rank()));

  const std::string metrics_path = cfg.out + "/metrics.jsonl";
  if (world.is_root()) {
    make_dirs(cfg.out);
    fs::write_file_atomic(cfg.out + "/config.yaml", yaml);
    keep_metrics_through(metrics_path, state.step);
    if (cfg.rollout.write_rollouts) make_dirs(cfg.out + "/rollouts");
    log::info("train: ", world.size(), " rank(s): ", colocated ? "colocated" : str(num_learners, " learner(s) + ", world.size() - num_learners, " actor(s)"),
              " on ", device.str(), "; ", cfg.total_steps(), " steps in ", stages.size(), " stage(s); ",
              resume_from.empty() ? std::string("fresh start") : "resuming from " + resume_from);
  }
  world.barrier();

  // ---- the stage / step loop ----
  int64_t step = state.step, version = state.policy_version, stage_start = 0;
  result.first_step = step + 1;
  const int64_t total = cfg.total_steps();
  for (size_t si = 0; si < stages.size(); ++si) {
    const auto& st = stages[si];
    const int64_t stage_end = stage_start + st.cfg.steps;
    rl::Curriculum curriculum(static_cast<int64_t>(st.tasks.size()), cfg.rollout.tasks_per_step, cfg.rollout.curriculum,
                              cfg.sampler.seed);
    for (; step < stage_end; ) {
      ++step;
      maybe_die(cfg.fault, step, world.rank());
      Timer t_step;
      const int64_t cursor = (step - stage_start - 1) * cfg.rollout.tasks_per_step;
      const auto slots = curriculum.tasks_at(cursor);
      json part = {{"rank", world.rank()}, {"times", json::object()}};

      // actors: sample, score, advantages
      ActorOutput rollouts;
      if (is_actor) {
        rollouts = actor->step(st, slots, step);
        for (const char* k : {"time_sample_s", "time_judge_s", "time_advantage_s"})
          part["times"][k] = rollouts.metrics[k];
        part["actor"] = rollouts.metrics;
        if (colocated) actor->release();
      }
      // rollouts -> learners
      Timer t_transfer;
      std::vector<Rollout> mine = colocated ? rollouts.mine
                                            : transfer_rollouts(*world_comm, rollouts.mine, is_actor, num_learners, world.size());
      // Times are reported by the ranks that do the work (a learner's wait for actors is not transfer).
      if (is_actor) part["times"]["time_transfer_s"] = t_transfer.elapsed_s();
      // learners: rows, old log-probs, updates
      if (is_learner) {
        auto lm = learner->step(mine);
        for (const char* k : {"time_rows_s", "time_old_logp_s", "time_update_s"}) part["times"][k] = lm[k];
        part["learner"] = lm;
      }
      ++version;
      // new weights -> actors, in place (the sampler's packed weights and graphs stay valid)
      Timer t_sync;
      int64_t sync_bytes = 0;
      if (colocated) {
        torch::NoGradGuard ng;
        auto src = learner->params();
        auto dst = params_of(*actor_model);
        for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      } else if (sync_comm) {
        auto ps = is_actor ? params_of(*actor_model) : learner->params();
        sync_bytes = dist::broadcast_parameters(*sync_comm, ps, 0, actor_dtype, cfg.dist.bucket_mb << 20);
      }
      if (device.is_cuda()) torch::cuda::synchronize();
      const double sync_s = t_sync.elapsed_s();
      if (is_learner || colocated) part["times"]["time_weight_sync_s"] = sync_s;
      if (sync_bytes > 0 && world.is_root()) {
        part["weight_sync_bytes"] = sync_bytes;
        part["weight_sync_gbps"] = static_cast<double>(sync_bytes) / std::max(sync_s, 1e-9) / 1e9;
      }
      if (cfg.dist.checksum_weights) {
        if (is_learner) {
          part["checksum_learner"] = dist::parameters_checksum(learner->params(), torch::kFloat32);
          part["checksum_learner_cast"] = dist::parameters_checksum(learner->params(), actor_dtype);
        }
        if (is_actor) part["checksum_actor"] = dist::parameters_checksum(params_of(*actor_model), actor_dtype);
      }

      // checkpoint: every K steps and at the stage end
      Timer t_ckpt;
      std::string saved;
      if (step % cfg.ckpt.every == 0 || (cfg.ckpt.stage_end && step == stage_end)) {
        auto rngs = world.gather(rng_state_bytes());
        if (is_learner) {
          ckpt::TrainState ts;
          ts.step = step;
          ts.stage = st.cfg.name;
          ts.cursor = cursor + cfg.rollout.tasks_per_step;
          ts.policy_version = version;
          for (size_t r = 0; r < rngs.size(); ++r) ts.rng[static_cast<int>(r)] = rngs[r];
          ts.config_yaml = yaml;
          ckpt::SaveOptions so;
          so.rank = role_rank;
          so.leader = role_rank == 0;
          so.keep_last = cfg.ckpt.keep_last;
          for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                "added_tokens.json", "special_tokens_map.json"})
            so.copy_files.push_back(model_dir + "/" + f);
          MPI_Comm lc = world.role_comm();
          so.barrier = [lc] { MPI_Barrier(lc); };
          auto state_dict = so.leader ? (*master)->state_dict(torch::kFloat32) : model::NamedTensors{};
          const bool writes_optim = cfg.optim.zero1 || role_rank == 0;
          auto os = learner->optimizer().state();
          saved = ckpt::save_checkpoint(cfg.out, step, state_dict, writes_optim ? &os : nullptr, ts, so);
        }
      }
      if (is_learner) part["times"]["time_checkpoint_s"] = t_ckpt.elapsed_s();
      part["times"]["time_step_s"] = t_step.elapsed_s();

      // metrics and the progress line (rank 0 = learner 0)
      auto parts = world.gather(part.dump());
      std::vector<std::string> roll_parts;
      if (cfg.rollout.write_rollouts) {
        json lines = json::array();
        for (const auto& r : rollouts.mine)
          lines.push_back({{"step", step}, {"sample", r.sample}, {"task_id", st.tasks[static_cast<size_t>(r.task)].id},
                           {"reward", r.reward}, {"advantage", r.traj.advantage}, {"kept", r.kept},
                           {"prompt_tokens", r.traj.prompt_ids.size()}, {"response_ids", r.traj.response_ids},
                           {"step_map", r.traj.step_map}, {"stop_token", r.stop_token}, {"policy_version", version - 1}});
        roll_parts = world.gather(lines.dump());
      }
      if (world.is_root()) {
        auto rec = merge_metrics(parts, step, st.cfg.name, version);
        if (!saved.empty()) rec["checkpoint"] = saved;
        append_line(metrics_path, rec.dump());
        if (cfg.rollout.write_rollouts) {
          std::string text;
          for (const auto& p : roll_parts)
            for (const auto& l : json::parse(p)) text += l.dump() + "\n";
          fs::write_file_atomic(cfg.out + "/rollouts/" + ckpt::step_dir_name(step) + ".jsonl", text);
        }
        std::printf("%s\n", progress_line(rec, total).c_str());
        result.reward_mean.push_back(rec.value("reward_mean", 0.0));
      }
      if (!saved.empty()) result.last_checkpoint = saved;
      result.last_step = step;
    }
    stage_start = stage_end;
  }
  if (sync_mpi != MPI_COMM_NULL) MPI_Comm_free(&sync_mpi);
  world.barrier();
  return result;
}

}  // namespace dice::train
