// EvalRunner: shard -> sample -> judge -> record, then merge and report on rank 0.
#include "dice/train/eval_runner.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/ckpt/checkpoint.h"
#include "dice/judge/judge_queue.h"
#include "dice/judge/task.h"
#include "dice/model/transformer.h"
#include "dice/text/chat.h"
#include "dice/text/prompt.h"
#include "dice/text/tokenizer.h"
#include "dice/train/eval_report.h"
#include "dice/train/sample_store.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::train {
namespace stdfs = std::filesystem;
using nlohmann::json;

rollout::SamplerConfig EvalConfig::default_sampler() {
  // The DICE evaluation protocol: block 4, 4 steps, one token per step (static), greedy, 4,096 tokens.
  rollout::SamplerConfig s;
  s.steps = 4;
  s.strategy = "static";
  s.temperature = 0.0;
  s.top_k = 1;
  s.max_new_tokens = 4096;
  return s;
}

void EvalConfig::validate() const {
  DICE_REQUIRE(samples >= 1, "eval.samples must be >= 1, got ", samples);
  DICE_REQUIRE(chunk >= 1, "eval.chunk must be >= 1, got ", chunk);
  for (int k : pass_k) DICE_REQUIRE(k >= 1, "eval.pass_k values must be >= 1, got ", k);
}

std::string project_root() {
  const char* home = std::getenv("DICE_HOME");
  if (home && *home) return home;
#ifdef DICE_SOURCE_DIR
  return DICE_SOURCE_DIR;
#else
  return ".";
#endif
}


std::vector<judge::Task> load_eval_tasks(const EvalConfig& cfg) {
  DICE_REQUIRE(!cfg.tasks.empty() || !cfg.kernelbench.empty(), "dice eval needs --tasks FILE or --kernelbench DIR");
  DICE_REQUIRE(cfg.tasks.empty() || cfg.kernelbench.empty(), "give either --tasks or --kernelbench, not both");
  std::vector<judge::Task> tasks;
  if (!cfg.tasks.empty()) {
    tasks = judge::load_tasks(cfg.tasks);
  } else {
    tasks = judge::import_kernelbench(cfg.kernelbench, cfg.levels.empty() ? std::vector<int>{1, 2, 3} : cfg.levels);
  }
  if (!cfg.levels.empty()) {
    std::vector<judge::Task> kept;
    for (auto& t : tasks)
      if (std::find(cfg.levels.begin(), cfg.levels.end(), t.level) != cfg.levels.end()) kept.push_back(std::move(t));
    tasks = std::move(kept);
  }
  DICE_REQUIRE(!tasks.empty(), "no tasks to evaluate (check --tasks/--kernelbench and --levels)");
  return tasks;
}

namespace {

// A checkpoint step dir holds model.h5; a run dir holds step_* dirs; anything else is an HF folder.
std::string resolve_checkpoint(const std::string& path) {
  DICE_REQUIRE(!path.empty(), "dice eval needs --checkpoint (an HF folder, a checkpoint or a run folder)");
  DICE_REQUIRE(fs::exists(path), "checkpoint '", path, "' does not exist");
  if (fs::exists(path + "/model.h5") || fs::exists(path + "/config.json")) return path;
  auto latest = ckpt::find_latest_complete(path);
  DICE_REQUIRE(latest.has_value(), "'", path, "' is neither a model folder nor a run folder with a complete checkpoint");
  log::info("eval: using the latest complete checkpoint ", *latest);
  return *latest;
}

model::Transformer load_policy(const std::string& dir, torch::Device device) {
  torch::Dtype dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  if (!fs::exists(dir + "/model.h5")) return model::load_hf_model(dir, dtype, device);
  DICE_REQUIRE(fs::exists(dir + "/config.json"), "checkpoint '", dir,
               "' has no config.json (import checkpoints with `dice ckpt import-hf`)");
  auto cfg = model::ModelConfig::from_hf_dir(dir);
  model::Transformer m(cfg, dtype, device);
  m->load_weights(ckpt::load_model(dir));
  return m;
}

torch::Device pick_device(const std::string& want, const dist::World& world) {
  bool cuda = torch::cuda::is_available();
  DICE_REQUIRE(want != "cuda" || cuda, "eval.device is 'cuda' but no CUDA device is visible");
  if (want == "cpu" || !cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.device_index(torch::cuda::device_count())));
}

std::string prompt_for(const judge::Task& t, const EvalConfig& cfg, std::map<std::string, std::string>& cache) {
  auto kind = t.infill ? text::PromptKind::kInfill : text::PromptKind::kEndToEnd;
  auto dev = t.device == "cpu" ? text::PromptDevice::kCpu : text::PromptDevice::kCuda;
  std::string path = cfg.prompt_template.empty() ? project_root() + "/" + text::default_prompt_template(kind, dev)
                                                 : cfg.prompt_template;
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, text::load_prompt_template(path)).first;
  return t.infill ? text::infill_prompt(it->second, t.reference, t.infill->prefix, t.infill->suffix)
                  : text::end_to_end_prompt(it->second, t.reference);
}

// The judge's executors inherit CUDA_VISIBLE_DEVICES: narrow it to this rank's GPU so ranks on
// one node time their candidates on different GPUs (this process has already chosen its device).
void pin_judge_gpu(const dist::World& world) {
  if (!torch::cuda::is_available()) return;
  int idx = world.device_index(static_cast<int>(torch::cuda::device_count()));
  std::vector<std::string> visible;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    std::string s = v;
    for (size_t pos = 0; pos <= s.size();) {
      size_t comma = s.find(',', pos);
      if (comma == std::string::npos) comma = s.size();
      visible.push_back(s.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  std::string mine = idx < static_cast<int>(visible.size()) ? visible[idx] : std::to_string(idx);
  setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
}

struct Item {
  size_t task = 0;
  int sample = 0;
  int64_t index = 0;  // task * samples + sample: the sampler's noise stream
};

// Responses given up front (--responses / --use-solutions), keyed by sample_key.
std::map<std::string, std::string> given_responses(const EvalConfig& cfg, const std::vector<judge::Task>& tasks) {
  std::map<std::string, std::string> out;
  if (cfg.use_solutions) {
    for (const auto& t : tasks) {
      DICE_REQUIRE(!t.solution.empty(), "--use-solutions: task '", t.id, "' has no solution");
      for (int s = 0; s < cfg.samples; ++s) out[sample_key(t.id, s)] = "```python\n" + t.solution + "```\n";
    }
  } else if (!cfg.responses.empty()) {
    fs::for_each_line(cfg.responses, [&](int lineno, const std::string& line) {
      try {
        auto j = json::parse(line);
        out[sample_key(j.at("task_id").get<std::string>(), j.value("sample_id", 0))] = j.at("response").get<std::string>();
      } catch (const json::exception& e) {
        throw Error(str(cfg.responses, ":", lineno, ": not a {task_id, sample_id?, response} record (", e.what(), ")"));
      }
    });
  }
  return out;
}

}  // namespace

EvalResult run_eval(const EvalConfig& cfg, const dist::World& world) {
  cfg.validate();
  Timer wall;
  const auto tasks = load_eval_tasks(cfg);
  const auto given = given_responses(cfg, tasks);
  const bool use_model = cfg.use_solutions == false && cfg.responses.empty();

  SampleStore store(cfg.out, world.rank());
  world.barrier();  // every rank sees the folder before reading it
  const auto done = store.done_keys();

  std::vector<Item> todo;
  EvalResult result;
  for (size_t t = 0; t < tasks.size(); ++t)
    for (int s = 0; s < cfg.samples; ++s) {
      ++result.items;
      if (done.count(sample_key(tasks[t].id, s))) { ++result.resumed; continue; }
      if (!use_model && !given.count(sample_key(tasks[t].id, s)))
        throw Error(str("no response given for task '", tasks[t].id, "' sample ", s));
      todo.push_back({t, s, static_cast<int64_t>(t) * cfg.samples + s});
    }
  auto shard = dist::shard_range(static_cast<int64_t>(todo.size()), world.rank(), world.size());
  log::info("eval: ", tasks.size(), " tasks x ", cfg.samples, " samples = ", result.items, " items; ", result.resumed,
            " already judged, ", todo.size(), " to do on ", world.size(), " rank(s)");

  std::optional<model::Transformer> policy;
  std::optional<text::Tokenizer> tokenizer;
  std::unique_ptr<rollout::Sampler> sampler;
  std::string ckpt_dir;
  if (use_model && shard.end > shard.begin) {
    ckpt_dir = resolve_checkpoint(cfg.checkpoint);
    auto device = pick_device(cfg.device, world);
    tokenizer = text::Tokenizer::from_dir(ckpt_dir);
    policy = load_policy(ckpt_dir, device);
    text::check_compatible(*tokenizer, (*policy)->config().vocab_size, (*policy)->config().mask_token_id);
    sampler = std::make_unique<rollout::Sampler>(*policy, cfg.sampler);
  }

  pin_judge_gpu(world);
  judge::Judge judger(cfg.judge);  // static checks: judge.static_checks

  std::map<std::string, std::string> templates;
  log::Progress progress("eval", shard.end - shard.begin);
  int64_t finished = 0;
  for (int64_t begin = shard.begin; begin < shard.end; begin += cfg.chunk) {
    const int64_t end = std::min<int64_t>(begin + cfg.chunk, shard.end), n = end - begin;
    // Slots filled before their job is submitted (the judge's worker reads slot k only after).
    std::vector<std::string> prompts(static_cast<size_t>(n)), responses(static_cast<size_t>(n));
    std::vector<rollout::SampleRecord> gens(static_cast<size_t>(n));
    std::vector<double> sampled_after_s(static_cast<size_t>(n), 0.0);
    for (int64_t i = begin; i < end; ++i) prompts[i - begin] = prompt_for(tasks[todo[i].task], cfg, templates);
    Timer chunk_timer;

    // Each record is stored as soon as its verdict is final: a job killed mid-chunk (a Slurm
    // time limit) loses only the candidates still being judged.
    std::string store_error;  // the judge's worker calls store_record: errors are raised after drain()
    int64_t judged = 0;
    auto store_record = [&](int64_t k, const judge::Verdict& verdict) {
      progress.update(finished + ++judged);
      if (!store_error.empty()) return;
      int64_t i = begin + k;
      const auto& t = tasks[todo[i].task];
      json rec = {{"task_id", t.id},
                  {"sample_id", todo[i].sample},
                  {"level", t.level},
                  {"difficulty", t.difficulty},
                  {"prompt", prompts[k]},
                  {"response", responses[k]},
                  {"verdict", verdict},
                  {"timings", {{"sampled_after_s", sampled_after_s[k]}, {"judged_after_s", chunk_timer.elapsed_s()}}}};
      if (use_model) {
        rec["checkpoint"] = ckpt_dir;
        rec["response_tokens"] = gens[k].response_ids.size();
        rec["stop_reason"] = gens[k].stop_reason;
        rec["denoising_steps"] = gens[k].steps;
        rec["prompt_tokens"] = gens[k].prompt_ids.size();
      } else {
        rec["source"] = cfg.use_solutions ? "solutions" : cfg.responses;
      }
      try {
        store.append(rec);
      } catch (const std::exception& e) {
        store_error = e.what();
      }
    };
    // The same pipeline as the RL actor: each sequence goes to the judge as soon as it is decoded.
    // The DICE/KernelBench protocol judges the FIRST fenced code block of the answer.
    judge::JudgeQueue queue(judger, store_record);
    auto submit = [&](int64_t k) {
      queue.submit(k, {&tasks[todo[begin + k].task], judge::extract_candidate_code(responses[k]), true});
    };
    if (use_model) {
      // Runs of consecutive item indices share one generate() call (noise stream = item index).
      int64_t run_first = 0;
      rollout::ScopedRecordFn to_judge(*sampler, [&](int64_t idx, const rollout::SampleRecord& r) {
        const int64_t k = run_first + idx;
        std::vector<int32_t> resp(r.response_ids.begin(), r.response_ids.end());
        responses[k] = tokenizer->decode(resp, /*skip_special=*/true);
        gens[k] = r;
        sampled_after_s[k] = chunk_timer.elapsed_s();
        submit(k);
      });
      int64_t i = begin;
      while (i < end) {
        int64_t j = i + 1;
        while (j < end && todo[j].index == todo[j - 1].index + 1) ++j;
        std::vector<std::vector<int64_t>> ids;
        for (int64_t k = i; k < j; ++k) {
          auto enc = tokenizer->encode(text::chat_prompt(prompts[k - begin]));
          ids.emplace_back(enc.begin(), enc.end());
        }
        run_first = i - begin;
        sampler->generate(ids, static_cast<uint64_t>(todo[i].index));
        i = j;
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        responses[k] = given.at(sample_key(tasks[todo[begin + k].task].id, todo[begin + k].sample));
        submit(k);
      }
    }
    queue.drain();
    if (!store_error.empty()) throw Error(store_error);
    finished += n;
    result.judged_here += n;
    progress.update(finished);
  }
  progress.finish();

  world.barrier();
  if (world.is_root()) {
    std::vector<std::string> order;
    for (const auto& t : tasks) order.push_back(t.id);
    result.report_md = write_report(cfg, tasks, cfg.out, store.merge(order));
    log::info("eval: done in ", static_cast<int>(wall.elapsed_s()), " s; results in ", cfg.out);
  }
  world.barrier();
  return result;
}

}  // namespace dice::train
