#pragma once
// EvalRunner: offline evaluation of a checkpoint (DESIGN §1 "evaluate checkpoints offline").
//
// Items are (task, sample_id) pairs in task order. Every rank reads the result folder, drops
// the items already judged (resume), takes a contiguous shard of the rest, samples responses
// with the block-diffusion sampler (greedy by default: the DICE protocol), judges them, and
// appends one record per item to its part file. After a barrier rank 0 merges the records into
// samples.jsonl and writes report.json, report.md and plots.
//
// Item i = task_index * samples + sample_id uses noise stream i, so results do not depend on the
// number of ranks.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dice/dist/world.h"
#include "dice/judge/judge.h"
#include "dice/rollout/sampler.h"
#include "dice/util/run_dir.h"

namespace dice::train {

struct EvalConfig {
  std::string checkpoint;        // HF folder, checkpoint dir (step_N/) or run dir (latest complete)
  std::string tasks;             // task JSONL
  std::string kernelbench;       // or a KernelBench checkout
  std::vector<int> levels;       // empty = all levels of the task set
  std::string out = "runs/eval";
  int samples = 1;               // samples per task (pass@k needs > 1)
  std::vector<int> pass_k = {1};
  std::vector<double> fast_p = {0.0, 1.0, 2.0};
  std::string prompt_template;   // "" = configs/prompts default for the task kind and device
  std::string kind = "auto";     // auto (infill where a task has a split) | infill | end_to_end
  std::string answer = "file";   // what an infill task's answer is: file | middle (task_prompt.h)
  std::string responses;         // JSONL {task_id, sample_id?, response}: judge these, no model
  bool use_solutions = false;    // judge each task's honest solution as the response (no model)
  std::string baseline;          // baseline timing file (dice eval baseline): speedups against it
  std::string device = "auto";   // model device: auto | cpu | cuda
  std::string dtype = "auto";    // model weights: auto (bf16 on a GPU, fp32 on CPUs) | float16 | bfloat16 | float32
  int64_t chunk = 64;            // items sampled and judged together
  bool plots = true;
  rollout::SamplerConfig sampler = default_sampler();
  judge::JudgeConfig judge;

  static rollout::SamplerConfig default_sampler();
  template <class V> void visit(V& v) {
    v("checkpoint", checkpoint, "HF folder, checkpoint step dir, or run dir (latest complete)");
    v("tasks", tasks, "task JSONL file");
    v("kernelbench", kernelbench, "KernelBench checkout (instead of tasks)");
    v("levels", levels, "levels to evaluate (empty = all)");
    v("out", out, "result folder (rerun = resume)");
    v("samples", samples, "samples per task");
    v("pass_k", pass_k, "k values for pass@k");
    v("fast_p", fast_p, "speedup thresholds p for fast_p");
    v("prompt_template", prompt_template, "prompt template file");
    v.choice("kind", kind, {"auto", "infill", "end_to_end"},
             "prompt kind: auto = infill for tasks with an infill split (prefix/suffix), end_to_end for the "
             "others; end_to_end = the reference alone for every task (DICE's second stage)");
    v.choice("answer", answer, {"file", "middle"},
             "what the answer to an infill task's prompt is: file (the whole file in a code block, DICE) or "
             "middle (only the code between prefix and suffix; judged as prefix + answer + suffix)");
    v("responses", responses, "judge these responses instead of sampling");
    v("use_solutions", use_solutions, "judge the tasks' honest solutions (pipeline check)");
    v("baseline", baseline, "baseline timing file");
    v.choice("device", device, {"auto", "cpu", "cuda"}, "model device");
    v.choice("dtype", dtype, {"auto", "float16", "bfloat16", "float32"},
             "model weights' dtype for sampling (auto: bf16 on a GPU, fp32 on CPUs; DICE's evaluation: float16)");
    v("chunk", chunk, "items per sample+judge round");
    v("plots", plots, "write PNG plots");
    v("sampler", sampler, "block-diffusion sampler");
    v("judge", judge, "kernel judge");
  }
  void validate() const;
};

struct EvalResult {
  int64_t items = 0;         // all (task, sample) items
  int64_t resumed = 0;       // already judged before this run
  int64_t judged_here = 0;   // judged by this rank in this run
  std::string report_md;     // root only
};

// The result folder follows dice/util/run_dir.h: rank 0 checks it writable, locks it, and compares
// its fingerprint (checkpoint identity, task file digest, the config keys that change records);
// a different one is refused unless `on_mismatch` says start afresh or continue. config.yaml is
// written only after these checks pass. An item whose prompt does not fit sampler.max_len becomes
// a failure record (verdict resource_limit, "not_run": the reason) and the run goes on.
EvalResult run_eval(const EvalConfig& cfg, const dist::World& world,
                    run_dir::OnMismatch on_mismatch = run_dir::OnMismatch::kRefuse);

// Where configs/ and tools/ live: util::home_dir() ($DICE_HOME, the install prefix, the source tree).
std::string project_root();
// The tasks an eval config names (--tasks or --kernelbench, filtered by levels).
std::vector<judge::Task> load_eval_tasks(const EvalConfig& cfg);
// Rebuilds report.{json,md} (and plots) from the records in a result folder, or from `records`
// when the caller has them already (the merge just returned them).
std::string write_report(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::string& out_dir);
std::string write_report(const EvalConfig& cfg, const std::vector<judge::Task>& tasks, const std::string& out_dir,
                         std::vector<nlohmann::json> records);
// Side-by-side table of several result folders (reads their report.json).
std::string compare_reports(const std::vector<std::string>& dirs, const std::string& out_dir);

}  // namespace dice::train
