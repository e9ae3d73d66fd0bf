// `dice judge`: evaluate a file of candidates against a task set and write verdicts.
//   dice judge --tasks configs/tasks/builtin_cpu.jsonl --candidates cands.jsonl --out verdicts.jsonl
// Candidates: JSONL records {task_id, response | code, sample_id?}. Verdicts: JSONL, one per
// candidate in input order, the Verdict fields plus sample_id and reward.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/config/config.h"
#include "dice/judge/judge.h"
#include "dice/judge/reward.h"
#include "dice/judge/task.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct CandidateRecord {
  std::string task_id;
  std::string text;
  bool is_code = false;
  nlohmann::json sample_id;  // passed through (null when absent)
};

std::vector<CandidateRecord> load_candidates(const std::string& path) {
  DICE_REQUIRE(fs::exists(path), "the candidates file '", path, "' does not exist");
  std::vector<CandidateRecord> out;
  fs::for_each_line(path, [&](int lineno, const std::string& line) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    DICE_REQUIRE(!j.is_discarded() && j.is_object(), path, ":", lineno, ": not a JSON object");
    CandidateRecord c;
    DICE_REQUIRE(j.contains("task_id") && j["task_id"].is_string(), path, ":", lineno, ": missing string field 'task_id'");
    c.task_id = j["task_id"].get<std::string>();
    if (j.contains("code") && j["code"].is_string()) {
      c.text = j["code"].get<std::string>();
      c.is_code = true;
    } else if (j.contains("response") && j["response"].is_string()) {
      c.text = j["response"].get<std::string>();
    } else {
      DICE_REQUIRE(false, path, ":", lineno, ": needs a string field 'response' or 'code'");
    }
    if (j.contains("sample_id")) c.sample_id = j["sample_id"];
    out.push_back(std::move(c));
  });
  return out;
}

struct JudgeArgs {
  ConfigArgs config;
  std::string tasks, candidates, out;
};

void run(const JudgeArgs& a) {
  auto cfg = config::load<judge::JudgeConfig>(config::load_tree(a.config.config_path, a.config.sets));
  std::vector<judge::Task> tasks = judge::load_tasks(a.tasks);
  std::map<std::string, const judge::Task*> by_id;
  for (const auto& t : tasks) by_id[t.id] = &t;
  auto cands = load_candidates(a.candidates);
  std::vector<judge::Job> jobs;
  for (size_t i = 0; i < cands.size(); ++i) {
    auto it = by_id.find(cands[i].task_id);
    DICE_REQUIRE(it != by_id.end(), a.candidates, ": candidate ", i + 1, " names task '", cands[i].task_id,
                 "', which is not in ", a.tasks);
    judge::Job j;
    j.task = it->second;
    j.text = cands[i].text;
    j.is_code = cands[i].is_code;
    jobs.push_back(j);
  }
  judge::Judge judge(cfg);
  const auto kind = judge::reward_kind_from_name(cfg.reward);
  log::info("judge: ", jobs.size(), " candidates, ", tasks.size(), " tasks, ", cfg.compile_workers,
            " compile workers, ", cfg.executors, " executors");
  Timer timer;
  log::Progress bar("judge", static_cast<long>(jobs.size()));
  auto verdicts = judge.judge(jobs, [&](size_t done, size_t) { bar.update(static_cast<long>(done)); });
  bar.finish();
  double wall = timer.elapsed_s();

  std::string text;
  std::map<std::string, int> classes;
  int correct = 0, hits = 0;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    nlohmann::json j = verdicts[i];
    j["sample_id"] = cands[i].sample_id;
    j["reward"] = judge::reward(verdicts[i], kind, cfg.tau);
    text += j.dump() + "\n";
    classes[judge::failure_name(verdicts[i].failure)]++;
    correct += verdicts[i].correct;
    hits += verdicts[i].cache_hit;
  }
  fs::write_file_atomic(a.out, text);
  std::string hist;
  for (auto& [k, n] : classes) hist += str(" ", k, "=", n);
  log::info("judge: ", correct, "/", verdicts.size(), " correct, ", hits, " build cache hits, ", wall, " s (",
            verdicts.empty() ? 0.0 : 60.0 * verdicts.size() / wall, " candidates/min); classes:", hist);
  log::info("judge: verdicts written to ", a.out);
}

void setup(CLI::App& cmd) {
  auto a = std::make_shared<JudgeArgs>();
  a->config.add_to(cmd);
  cmd.add_option("--tasks", a->tasks, "task set (JSONL)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--candidates", a->candidates, "candidates (JSONL: task_id, response or code, sample_id)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--out", a->out, "verdicts (JSONL)")->required();
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_SUBCOMMAND("judge", "evaluate candidate kernels against their tasks and write verdicts", setup);

}  // namespace dice::app
