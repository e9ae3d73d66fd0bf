// EvalRunner: shard -> sample -> judge -> record, then merge and report on rank 0.
#include "dice/train/eval_runner.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "dice/ckpt/checkpoint.h"
#include "dice/config/config.h"
#include "dice/judge/judge_queue.h"
#include "dice/judge/task.h"
#include "dice/model/transformer.h"
#include "dice/text/chat.h"
#include "dice/text/tokenizer.h"
#include "dice/train/eval_report.h"
#include "dice/train/model_source.h"
#include "dice/train/rl_config.h"
#include "dice/train/sample_runs.h"
#include "dice/train/sample_store.h"
#include "dice/train/task_prompt.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/home.h"
#include "dice/util/log.h"
#include "dice/util/run_dir.h"
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

std::string project_root() { return util::home_dir(); }


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
  if (cfg.kind == "end_to_end") {  // the reference alone: the infill split is not shown
    for (auto& t : tasks) t.infill.reset();
  } else if (cfg.kind == "infill") {
    for (const auto& t : tasks)
      DICE_REQUIRE(t.infill.has_value(), "eval.kind is infill, but task '", t.id,
                   "' has no infill split (prefix/suffix); use kind: auto or end_to_end");
  }
  return tasks;
}

namespace {

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
      std::string answer = "```python\n" + t.solution + "```\n";
      if (cfg.answer == "middle" && t.infill) {  // the part of the solution between prefix and suffix
        auto middle = infill_middle(t, t.solution);
        DICE_REQUIRE(middle.has_value(), "--use-solutions: the solution of task '", t.id,
                     "' does not begin with its infill prefix and end with its suffix");
        answer = *middle;
      }
      for (int s = 0; s < cfg.samples; ++s) out[sample_key(t.id, s)] = answer;
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

// Keys of the resolved eval config that do not change any stored record (where to write, how the
// report is drawn, how the work is spread); paths of inputs are replaced by their digests.
bool eval_key_affects_records(const std::string& k) {
  static const std::vector<std::string> neutral = {"out", "checkpoint", "tasks", "kernelbench", "responses", "levels",
                                                   "pass_k", "fast_p", "baseline", "plots", "chunk", "device",
                                                   "sampler.max_batch"};
  for (const auto& n : neutral)
    if (k == n) return false;
  return !runtime_only_key(k);
}

std::string tasks_digest(const EvalConfig& cfg, const std::vector<judge::Task>& tasks) {
  if (!cfg.tasks.empty()) return hash::sha256_file_hex(cfg.tasks);
  hash::Sha256 h;
  for (const auto& t : tasks) {
    for (const auto* part : {&t.id, &t.reference, &t.solution}) {
      h.update(*part);
      h.update("\n\x1f");
    }
  }
  return h.hex_digest();
}

bool holds_results(const std::string& dir) {
  if (fs::exists(dir + "/samples.jsonl")) return true;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir + "/parts", ec))
    if (e.path().extension() == ".jsonl" && stdfs::file_size(e.path(), ec) > 0) return true;
  return false;
}

// Rank 0: the result folder's contract (writable, locked, same fingerprint or asked otherwise);
// every rank gets the verdict. The lock is held by rank 0 until run_eval returns.
void plan_out_dir(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::string& model_id,
                  const std::string& model_src_dir, const std::string& device, run_dir::OnMismatch on_mismatch, const dist::World& world,
                  run_dir::DirLock& lock) {
  std::string verdict = "ok";
  if (world.is_root()) {
    try {
      run_dir::ensure_writable_dir(cfg.out, "--out");
      lock = run_dir::lock_dir(cfg.out, "the result folder " + cfg.out);
      run_dir::Fingerprint fp;
      const YAML::Node tree = config::to_yaml(cfg);
      for (const auto& [k, v] : config::flatten(tree))
        if (eval_key_affects_records(k)) fp["config." + k] = v;
      fp["tasks"] = tasks_digest(cfg, tasks);
      if (!model_id.empty()) {
        fp["checkpoint"] = model_id;
        fp["about.checkpoint"] = stdfs::absolute(model_src_dir).lexically_normal().string();
        fp["device"] = device;
      } else {
        fp["responses"] = cfg.use_solutions ? std::string("the tasks' solutions") : hash::sha256_file_hex(cfg.responses);
      }
      auto plan = run_dir::plan_resume(cfg.out, fp, holds_results(cfg.out), on_mismatch, "the result folder");
      if (plan == run_dir::Plan::kFresh) {
        log::info("eval: --fresh: removing the old results in ", cfg.out);
        run_dir::clear_results(cfg.out);
      }
      if (plan != run_dir::Plan::kResume || !run_dir::read_fingerprint(cfg.out)) run_dir::write_fingerprint(cfg.out, fp);
      save_resolved_config(cfg.out, config::dump(tree));
      log::set_file(cfg.out + "/log.txt");  // rank 0's lines, timestamped (as train and sft keep theirs)
    } catch (const Error& e) {
      verdict = std::string("error:") + e.what();
    }
  }
  verdict = world.broadcast(verdict);
  if (verdict.rfind("error:", 0) == 0) throw Error(verdict.substr(6));
}

// The failure record of an item that cannot run (its prompt does not fit sampler.max_len).
judge::Verdict not_run_verdict(const judge::Task& t, const std::string& why) {
  judge::Verdict v;
  v.task_id = t.id;
  v.failure = judge::Failure::kResourceLimit;
  v.log_tail = why;
  return v;
}

// The model a rank samples with (when it has items to sample).
struct EvalPolicy {
  std::optional<model::Transformer> model;
  std::optional<text::Tokenizer> tokenizer;
  std::unique_ptr<rollout::Sampler> sampler;
};

EvalPolicy load_eval_policy(const EvalConfig& cfg, const ModelSource& src, torch::Device device) {
  EvalPolicy p;
  p.tokenizer = text::Tokenizer::from_dir(src.dir);
  const torch::Dtype dtype = cfg.dtype == "float16"    ? torch::kFloat16
                             : cfg.dtype == "bfloat16" ? torch::kBFloat16
                             : cfg.dtype == "float32"  ? torch::kFloat32
                                                       : default_dtype(device);
  p.model = load_policy(src, dtype, device);
  text::check_compatible(*p.tokenizer, (*p.model)->config().vocab_size, (*p.model)->config().mask_token_id);
  p.sampler = std::make_unique<rollout::Sampler>(*p.model, cfg.sampler);
  return p;
}

// This rank's items, a chunk at a time: each prompt rendered, sampled (or its given response
// taken) and handed to the judge the moment it is decoded; each record stored as soon as its
// verdict is final, so a job killed mid-chunk (a Slurm time limit) loses only the candidates still
// being judged.
class EvalShard {
 public:
  EvalShard(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::vector<Item>& todo,
            const std::map<std::string, std::string>& given, const std::string& ckpt_dir, EvalPolicy* policy,
            judge::Judge& judger, SampleStore& store, int64_t items)
      : cfg_(cfg), tasks_(tasks), todo_(todo), given_(given), ckpt_dir_(ckpt_dir), policy_(policy), judger_(judger),
        store_(store), prompter_(cfg.prompt_template), progress_("eval: judged", items),
        sampling_("eval: sampled", items) {}

  // Items todo[begin, end).
  void run(int64_t begin, int64_t end);
  void finish() { progress_.finish(); }
  int64_t not_run() const { return not_run_; }

 private:
  struct Chunk;
  void store_record(Chunk& c, int64_t k, const judge::Verdict& verdict);
  void sample(Chunk& c, judge::JudgeQueue& queue);

  const EvalConfig& cfg_;
  const std::vector<judge::Task>& tasks_;
  const std::vector<Item>& todo_;
  const std::map<std::string, std::string>& given_;
  const std::string& ckpt_dir_;
  EvalPolicy* policy_;  // nullptr: the responses are given
  judge::Judge& judger_;
  SampleStore& store_;
  TaskPrompter prompter_;
  log::Progress progress_, sampling_;
  int64_t finished_ = 0, sampled_ = 0, not_run_ = 0;
};

// One chunk's slots, filled before their job is submitted (the judge's worker reads slot k only after).
struct EvalShard::Chunk {
  int64_t begin = 0, n = 0;
  std::vector<std::string> prompts, responses, not_run_why;  // not_run_why: set before such an item is stored
  std::vector<rollout::SampleRecord> gens;
  std::vector<double> sampled_after_s;
  Timer timer;
  int64_t judged = 0;
  std::string store_error;  // the judge's worker calls store_record: errors are raised after drain()
  std::mutex mu;            // the judge's worker and this thread (items that cannot run) both store
};

void EvalShard::store_record(Chunk& c, int64_t k, const judge::Verdict& verdict) {
  std::lock_guard<std::mutex> hold(c.mu);
  progress_.update(finished_ + ++c.judged);
  if (!c.store_error.empty()) return;
  const Item& item = todo_[c.begin + k];
  const auto& t = tasks_[item.task];
  json rec = {{"task_id", t.id},
              {"sample_id", item.sample},
              {"level", t.level},
              {"difficulty", t.difficulty},
              {"prompt", c.prompts[k]},
              {"response", c.responses[k]},
              {"verdict", verdict},
              {"timings", {{"sampled_after_s", c.sampled_after_s[k]}, {"judged_after_s", c.timer.elapsed_s()}}}};
  if (!c.not_run_why[k].empty()) {
    rec["checkpoint"] = ckpt_dir_;
    rec["not_run"] = c.not_run_why[k];
  } else if (policy_) {
    rec["checkpoint"] = ckpt_dir_;
    rec["response_tokens"] = c.gens[k].response_ids.size();
    rec["stop_reason"] = c.gens[k].stop_reason;
    rec["denoising_steps"] = c.gens[k].steps;
    rec["prompt_tokens"] = c.gens[k].prompt_ids.size();
  } else {
    rec["source"] = cfg_.use_solutions ? "solutions" : cfg_.responses;
  }
  try {
    store_.append(rec);
  } catch (const std::exception& e) {
    c.store_error = e.what();
  }
}

void EvalShard::run(int64_t begin, int64_t end) {
  Chunk c;
  c.begin = begin;
  c.n = end - begin;
  const auto n = static_cast<size_t>(c.n);
  c.prompts.resize(n);
  c.responses.resize(n);
  c.not_run_why.resize(n);
  c.gens.resize(n);
  c.sampled_after_s.assign(n, 0.0);
  for (int64_t k = 0; k < c.n; ++k) {
    const auto& t = tasks_[todo_[begin + k].task];
    c.prompts[k] = prompter_(t, t.infill.has_value());
  }
  c.timer.reset();
  // The same pipeline as the RL actor: each sequence goes to the judge as soon as it is decoded.
  judge::JudgeQueue queue(judger_, [&](int64_t k, const judge::Verdict& v) { store_record(c, k, v); });
  if (policy_) {
    sample(c, queue);
  } else {
    for (int64_t k = 0; k < c.n; ++k) {
      const auto& t = tasks_[todo_[begin + k].task];
      c.responses[k] = given_.at(sample_key(t.id, todo_[begin + k].sample));
      queue.submit(k, candidate_job(t, c.responses[k], cfg_.answer == "middle" && t.infill.has_value()));
    }
  }
  queue.drain();
  if (!c.store_error.empty()) throw Error(c.store_error);
  finished_ += c.n;
  progress_.update(finished_);
}

void EvalShard::sample(Chunk& c, judge::JudgeQueue& queue) {
  const text::Tokenizer& tok = *policy_->tokenizer;
  rollout::Sampler& sampler = *policy_->sampler;
  // An item whose prompt does not fit a cache row cannot run: it becomes a failure record naming
  // the task (kept on resume), and the others go on.
  std::vector<std::vector<int64_t>> enc(static_cast<size_t>(c.n));
  std::vector<SampleItem> items(static_cast<size_t>(c.n));
  const int64_t W = sampler.block_size();
  for (int64_t k = 0; k < c.n; ++k) {
    auto ids = tok.encode(text::chat_prompt(c.prompts[k]));
    const int64_t L = static_cast<int64_t>(ids.size());
    const int64_t need = (L + cfg_.sampler.max_new_tokens + W - 1) / W * W;
    items[k].stream = static_cast<uint64_t>(todo_[c.begin + k].index);  // noise stream = item index
    if (L > 0 && need <= cfg_.sampler.max_len) {
      enc[k].assign(ids.begin(), ids.end());
      items[k].prompt = &enc[k];
      continue;
    }
    const auto& t = tasks_[todo_[c.begin + k].task];
    std::string why = L == 0 ? str("task '", t.id, "': the prompt is empty; not sampled")
                             : str("task '", t.id, "': the prompt has ", L, " tokens; with sampler.max_new_tokens ",
                                   cfg_.sampler.max_new_tokens, " it needs sampler.max_len >= ", need, " (it is ",
                                   cfg_.sampler.max_len, "); not sampled, recorded as a failure");
    log::warn("eval: ", why);
    c.not_run_why[k] = why;
    ++not_run_;
    sampling_.update(++sampled_);
    store_record(c, k, not_run_verdict(t, why));
  }
  sample_runs(sampler, items, [&](size_t k, const rollout::SampleRecord& r) {
    std::vector<int32_t> resp(r.response_ids.begin(), r.response_ids.end());
    c.responses[k] = tok.decode(resp, /*skip_special=*/true);
    c.gens[k] = r;
    c.sampled_after_s[k] = c.timer.elapsed_s();
    sampling_.update(++sampled_);
    const auto& t = tasks_[todo_[c.begin + static_cast<int64_t>(k)].task];
    queue.submit(static_cast<int64_t>(k), candidate_job(t, c.responses[k], cfg_.answer == "middle" && t.infill.has_value()));
  });
}

}  // namespace

EvalResult run_eval(const EvalConfig& cfg, const dist::World& world, run_dir::OnMismatch on_mismatch) {
  cfg.validate();
  Timer wall;
  const auto tasks = load_eval_tasks(cfg);
  const auto given = given_responses(cfg, tasks);
  const bool use_model = cfg.use_solutions == false && cfg.responses.empty();

  // Everything a user can get wrong is refused before any work: the model, the device, the folder.
  ModelSource model_src;
  std::string model_id;
  torch::Device device = torch::kCPU;
  if (use_model) {
    model_src = resolve_model(cfg.checkpoint, "--checkpoint");
    device = pick_device(cfg.device, &world, "eval.device");
    if (world.is_root()) model_id = model_identity(model_src);
  }
  run_dir::DirLock lock;
  plan_out_dir(cfg, tasks, model_id, model_src.dir, device.is_cuda() ? "cuda" : "cpu", on_mismatch, world, lock);
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

  EvalPolicy policy;
  if (use_model && shard.end > shard.begin) policy = load_eval_policy(cfg, model_src, device);
  pin_judge_gpu(world);
  judge::Judge judger(cfg.judge);  // static checks: judge.static_checks
  EvalShard mine(cfg, tasks, todo, given, model_src.dir, use_model ? &policy : nullptr, judger, store,
                 shard.end - shard.begin);
  for (int64_t begin = shard.begin; begin < shard.end; begin += cfg.chunk) {
    const int64_t end = std::min<int64_t>(begin + cfg.chunk, shard.end);
    mine.run(begin, end);
    result.judged_here += end - begin;
  }
  mine.finish();
  if (mine.not_run() > 0)
    log::warn("eval: ", mine.not_run(), " item(s) could not run (prompt over sampler.max_len); recorded as failures");

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
