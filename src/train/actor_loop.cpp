// ActorLoop: sample -> score -> all-gather rewards -> group advantages (see actor_loop.h).
#include "dice/train/actor_loop.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <optional>

#include "dice/dist/world.h"
#include "dice/judge/judge_queue.h"
#include "dice/judge/reward.h"
#include "dice/rl/advantage.h"
#include "dice/text/chat.h"
#include "dice/train/eval_runner.h"
#include "dice/train/sample_runs.h"
#include "dice/train/task_prompt.h"
#include "dice/util/fs.h"
#include "dice/util/home.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::train {

StageData load_stage(const StageConfig& cfg, const text::Tokenizer& tok) {
  StageData st;
  st.cfg = cfg;
  // A relative path that is not there is looked up in the project tree (configs/tasks/...).
  for (auto* path : {&st.cfg.tasks, &st.cfg.prompt_template}) *path = util::in_home(*path);
  st.tasks = judge::load_tasks(st.cfg.tasks);
  DICE_REQUIRE(!st.tasks.empty(), "stage '", cfg.name, "': the task file ", cfg.tasks, " holds no tasks.");
  const bool infill = cfg.kind == "infill";
  if (infill) {
    std::vector<std::string> missing;
    for (const auto& t : st.tasks)
      if (!t.infill) missing.push_back(t.id);
    DICE_REQUIRE(missing.empty(), "stage '", cfg.name, "' is an infill stage, but ", missing.size(), " of ",
                 st.tasks.size(), " tasks in ", cfg.tasks, " have no infill split (prefix/suffix), e.g. '", missing[0],
                 "'. Use tasks with infill splits, or kind: end_to_end.");
  }
  TaskPrompter prompter(st.cfg.prompt_template);
  for (const auto& t : st.tasks) {
    std::string user = prompter(t, infill);
    auto enc = tok.encode(text::chat_prompt(user));
    st.prompt_ids.emplace_back(enc.begin(), enc.end());
    st.prompts.push_back(std::move(user));
    st.too_long += static_cast<int64_t>(st.prompt_ids.back().size()) > cfg.max_prompt_len;
  }
  DICE_REQUIRE(st.too_long < static_cast<int64_t>(st.tasks.size()), "stage '", cfg.name, "': every prompt is longer than max_prompt_len ",
               cfg.max_prompt_len, " tokens; raise stages[].max_prompt_len.");
  return st;
}

ActorLoop::ActorLoop(const RlRunConfig& cfg, model::Transformer policy, const text::Tokenizer& tok, dist::Comm& actors)
    : cfg_(cfg), policy_(std::move(policy)), tok_(tok), comm_(actors) {
  sampler_ = std::make_unique<rollout::Sampler>(policy_, cfg_.sampler);
  if (!cfg_.reward.synthetic_kind() || cfg_.eval.every > 0) {
    judge::JudgeConfig jc = cfg_.judge;
    jc.reward = cfg_.reward.synthetic_kind() ? "exec" : cfg_.reward.kind;
    judge_ = std::make_unique<judge::Judge>(jc);
  }
}

nlohmann::json ActorLoop::evaluate(const StageData& st, int64_t samples, int64_t step) {
  const int64_t N = static_cast<int64_t>(st.tasks.size()) * samples;
  const auto shard = dist::shard_range(N, comm_.rank(), comm_.size());
  // noise streams of their own: training's are step * N_train + sample, far below 2^62
  const uint64_t first = (uint64_t{1} << 62) + static_cast<uint64_t>(step * N);
  std::vector<SampleItem> items;
  int64_t too_long = 0;
  for (int64_t s = shard.begin; s < shard.end; ++s) {
    const auto& ids = st.prompt_ids[static_cast<size_t>(s / samples)];
    const bool fits = static_cast<int64_t>(ids.size()) <= st.cfg.max_prompt_len;
    too_long += !fits;
    items.push_back({fits ? &ids : nullptr, first + static_cast<uint64_t>(s)});
  }
  judge::JudgeQueue queue(*judge_);
  sampler_->set_temperature(cfg_.temperature_of(st.cfg));
  sample_runs(*sampler_, items, [&](size_t i, const rollout::SampleRecord& rec) {
    const int64_t s = shard.begin + static_cast<int64_t>(i);
    queue.submit(s, job_for(st, st.tasks[static_cast<size_t>(s / samples)], rec.response_ids));
  });
  int64_t correct = 0, compiled = 0, fast_1 = 0;
  std::map<std::string, int64_t> failures;
  if (too_long) failures["prompt_too_long"] = too_long;
  for (const auto& [s, v] : queue.drain(nullptr)) {
    correct += v.correct;
    compiled += v.compiled;
    fast_1 += v.correct && v.speedup > 1.0;
    ++failures[judge::failure_name(v.failure)];
  }
  return {{"samples", shard.end - shard.begin}, {"correct", correct}, {"compiled", compiled}, {"fast_1", fast_1},
          {"failures", failures}};
}

ActorOutput ActorLoop::step(const StageData& st, const std::vector<int64_t>& slots, int64_t step) {
  const int64_t G = cfg_.rollout.group_size, N = static_cast<int64_t>(slots.size()) * G;
  const auto shard = dist::shard_range(N, comm_.rank(), comm_.size());
  auto too_long = [&](int64_t s) {
    return static_cast<int64_t>(st.prompt_ids[static_cast<size_t>(slots[s / G])].size()) > st.cfg.max_prompt_len;
  };
  ActorOutput out;
  auto& m = out.metrics;
  sampler_->set_temperature(cfg_.temperature_of(st.cfg));  // the stage's (the learner scores at it)

  // ---- sample: runs of consecutive samples share one generate() call (noise stream = id); with
  // the judge's reward each finished sequence goes to the judge at once, so its builds run on the
  // CPUs while the GPU keeps sampling ----
  std::optional<judge::JudgeQueue> queue;
  if (!cfg_.reward.synthetic_kind()) queue.emplace(*judge_);
  Timer t_sample;
  std::vector<SampleItem> items;
  for (int64_t s = shard.begin; s < shard.end; ++s) {
    Rollout r;
    r.sample = s;
    r.task = slots[s / G];
    r.traj.prompt_ids = st.prompt_ids[static_cast<size_t>(r.task)];
    r.sampled = !too_long(s);
    out.mine.push_back(std::move(r));
  }
  for (const auto& r : out.mine)
    items.push_back({r.sampled ? &r.traj.prompt_ids : nullptr, static_cast<uint64_t>(step * N + r.sample)});
  auto recs = sample_runs(*sampler_, items, !queue ? nullptr : std::function([&](size_t i, const rollout::SampleRecord& rec) {
    const int64_t s = shard.begin + static_cast<int64_t>(i);
    queue->submit(s, job_for(st, st.tasks[static_cast<size_t>(slots[s / G])], rec.response_ids));
  }));
  int64_t response_tokens = 0;
  for (size_t i = 0; i < out.mine.size(); ++i) {
    auto& r = out.mine[i];
    if (!r.sampled) continue;
    auto& rec = recs[i];
    r.traj.response_ids = std::move(rec.response_ids);
    r.traj.step_map = std::move(rec.step_map);
    r.traj.tail_ids = std::move(rec.tail_ids);
    r.traj.tail_steps = std::move(rec.tail_steps);
    r.logprobs = std::move(rec.logprobs);
    r.stop_token = rec.stop_reason == "stop_token";
    response_tokens += static_cast<int64_t>(r.traj.response_ids.size());
  }
  m["time_sample_s"] = t_sample.elapsed_s();
  m["response_tokens"] = response_tokens;

  // ---- score (the judge's remaining work: what did not overlap sampling), then the advantages
  // of every group from everyone's rewards ----
  Timer t_judge;
  std::map<int64_t, judge::Verdict> verdicts;
  auto rewards = queue ? judge_rewards(*queue, shard.begin, out.mine.size(), m, &verdicts) : synthetic_rewards(out.mine);
  m["time_judge_s"] = t_judge.elapsed_s();
  Timer t_adv;
  auto all = gather_rewards(rewards, N);
  auto adv = rl::group_advantages(all, G);
  int64_t kept = 0, too_long_groups = 0;
  std::vector<int64_t> kept_index(static_cast<size_t>(N), -1);
  for (int64_t s = 0; s < N; ++s) {
    if (too_long(s)) continue;
    if (adv.keep[static_cast<size_t>(s)]) kept_index[static_cast<size_t>(s)] = kept++;
  }
  for (int64_t g = 0; g < N / G; ++g) too_long_groups += too_long(g * G);
  for (auto& r : out.mine) {
    r.reward = rewards[static_cast<size_t>(r.sample - shard.begin)];
    r.traj.advantage = adv.advantage[static_cast<size_t>(r.sample)];
    r.kept = kept_index[static_cast<size_t>(r.sample)];
  }
  m["time_advantage_s"] = t_adv.elapsed_s();
  // for rollouts/step_N.jsonl: what a person reads (not timed as the advantage phase)
  if (cfg_.rollout.write_rollouts) {
    for (const auto& r : out.mine) {
      const std::string answer = r.sampled ? decode(r.traj.response_ids) : "";
      nlohmann::json d = {{"response", answer}};
      auto v = verdicts.find(r.sample - shard.begin);
      if (v != verdicts.end()) {
        d["code"] = candidate_job(st.tasks[static_cast<size_t>(r.task)], answer, st.cfg.answer == "middle").text;
        d["verdict"] = {{"failure", judge::failure_name(v->second.failure)}, {"correct", v->second.correct},
                        {"compiled", v->second.compiled}, {"reward", r.reward}, {"speedup", v->second.speedup},
                        {"log_tail", v->second.log_tail.substr(0, 400)}};
      } else {
        d["verdict"] = {{"failure", queue ? (r.sampled ? "not_judged" : "prompt_too_long") : "synthetic_reward"},
                        {"reward", r.reward}};
      }
      out.details.push_back(std::move(d));
    }
  }
  // Step-wide numbers (identical on every actor): the trainer takes them from actor 0.
  double sum = 0, sq = 0;
  int64_t n_scored = 0;
  for (int64_t s = 0; s < N; ++s)
    if (!too_long(s)) {
      sum += all[static_cast<size_t>(s)];
      sq += all[static_cast<size_t>(s)] * all[static_cast<size_t>(s)];
      ++n_scored;
    }
  const double mean = n_scored ? sum / n_scored : 0;
  nlohmann::json step_wide = {{"samples", N},
                              {"groups", N / G},
                              {"kept_samples", kept},
                              {"zero_variance_groups", adv.zero_variance_groups - too_long_groups},
                              {"too_long_groups", too_long_groups},
                              {"reward_mean", mean},
                              {"reward_std", n_scored ? std::sqrt(std::max(0.0, sq / n_scored - mean * mean)) : 0.0}};
  double amin = 0, amax = 0, asum = 0;
  for (int64_t s = 0; s < N; ++s)
    if (kept_index[static_cast<size_t>(s)] >= 0) {
      const double a = adv.advantage[static_cast<size_t>(s)];
      amin = std::min(amin, a);
      amax = std::max(amax, a);
      asum += a;
    }
  step_wide["advantage_min"] = amin;
  step_wide["advantage_max"] = amax;
  step_wide["advantage_mean"] = kept ? asum / kept : 0.0;
  m["step"] = step_wide;
  return out;
}

std::string ActorLoop::decode(const std::vector<int64_t>& response) const {
  // Ids past the tokenizer (the model's padded vocabulary rows) have no text.
  std::vector<int32_t> ids;
  for (auto t : response)
    if (t < tok_.vocab_size()) ids.push_back(static_cast<int32_t>(t));
  return tok_.decode(ids, /*skip_special=*/true);
}

judge::Job ActorLoop::job_for(const StageData& st, const judge::Task& task, const std::vector<int64_t>& response) const {
  return candidate_job(task, decode(response), st.cfg.answer == "middle");
}

std::vector<double> ActorLoop::synthetic_rewards(const std::vector<Rollout>& rs) const {
  std::vector<double> rewards(rs.size(), 0.0);
  for (size_t i = 0; i < rs.size(); ++i)
    if (rs[i].sampled) rewards[i] = cfg_.reward.synthetic(rs[i].traj.response_ids, cfg_.sampler.stop_ids);
  return rewards;
}

std::vector<double> ActorLoop::judge_rewards(judge::JudgeQueue& queue, int64_t first, size_t n, nlohmann::json& m,
                                             std::map<int64_t, judge::Verdict>* kept) {
  judge::QueueStats qs;
  auto verdicts = queue.drain(&qs);  // sample index -> verdict; too-long prompts were not sampled
  std::vector<double> rewards(n, 0.0);
  const auto kind = judge::reward_kind_from_name(cfg_.reward.kind);
  int64_t compiled = 0, correct = 0, extracted = 0, findings = 0, cache_hits = 0, reused = 0;
  std::map<std::string, int64_t> failures;
  std::vector<double> compile_s, exec_s;
  for (const auto& [s, v] : verdicts) {
    rewards[static_cast<size_t>(s - first)] = judge::reward(v, kind, cfg_.judge.tau);
    compiled += v.compiled;
    correct += v.correct;
    extracted += v.extracted;
    findings += static_cast<int64_t>(v.findings.size());
    cache_hits += v.cache_hit;
    reused += v.reused;
    ++failures[judge::failure_name(v.failure)];
    compile_s.push_back(v.compile_s);
    exec_s.push_back(v.exec_s);
    if (kept) (*kept)[s - first] = v;
  }
  m["judged"] = static_cast<int64_t>(verdicts.size());
  m["compiled"] = compiled;
  m["correct"] = correct;
  m["extracted"] = extracted;
  m["static_findings"] = findings;
  m["judge_cache_hits"] = cache_hits;
  m["judge_reused"] = reused;
  m["failures"] = failures;
  m["judge_compile_s"] = compile_s;
  m["judge_exec_s"] = exec_s;
  m["judge_latency_s"] = qs.latency_s;
  m["judge_batches"] = qs.batches;
  m["judge_queue_max"] = qs.max_waiting;
  return rewards;
}

std::vector<double> ActorLoop::gather_rewards(const std::vector<double>& mine, int64_t n) {
  const int A = comm_.size();
  int64_t width = 0;
  for (int a = 0; a < A; ++a) {
    auto sh = dist::shard_range(n, a, A);
    width = std::max(width, sh.end - sh.begin);
  }
  auto buf = torch::zeros({std::max<int64_t>(width, 1)}, torch::kFloat64);
  for (size_t i = 0; i < mine.size(); ++i) buf[static_cast<int64_t>(i)] = mine[i];
  auto all = comm_.all_gather(buf.to(comm_.device())).to(torch::kCPU);  // [A, width]
  std::vector<double> out(static_cast<size_t>(n));
  for (int a = 0; a < A; ++a) {
    auto sh = dist::shard_range(n, a, A);
    for (int64_t s = sh.begin; s < sh.end; ++s) out[static_cast<size_t>(s)] = all[a][s - sh.begin].item<double>();
  }
  return out;
}

}  // namespace dice::train
