// `dice judge`: evaluate a file of candidates against a task set and write verdicts.
//   dice judge --tasks configs/tasks/builtin_cpu.jsonl --candidates cands.jsonl --out verdicts.jsonl
// Candidates: JSONL records {task_id, response | code, sample_id?}. Verdicts: JSONL, one per
// candidate in input order, the Verdict fields plus sample_id and reward.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/config/config.h"
#include "dice/judge/judge.h"
#include "dice/judge/judge_queue.h"
#include "dice/judge/reward.h"
#include "dice/judge/task.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/run_dir.h"
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

// The judge's keys, read as the `judge:` block of the config tree, so every message names them as
// `judge.<key>` and `--set judge.<key>=v` works; a plain `--set <key>=v` (and a config file of
// top-level judge keys) is read as the same key.
struct JudgeFileConfig {
  judge::JudgeConfig judge;
  template <class V> void visit(V& v) { v("judge", judge, "kernel judge"); }
};

judge::JudgeConfig load_judge_config(const ConfigArgs& args) {
  YAML::Node file = config::load_tree(args.config_path, {});
  YAML::Node root(YAML::NodeType::Map);
  if (file["judge"] && file.size() == 1) root = file;  // a file with a judge: block
  else root["judge"] = file;
  std::vector<std::string> sets;
  for (const auto& s : args.sets) sets.push_back(s.rfind("judge.", 0) == 0 ? s : "judge." + s);
  config::apply_overrides(root, sets);
  return config::load<JudgeFileConfig>(root).judge;
}

struct JudgeArgs {
  ConfigArgs config;
  std::string tasks, candidates, out;
  bool overwrite = false;
};

void run(const JudgeArgs& a) {
  // The output is checked before any work, and locked against a second run writing it.
  run_dir::ensure_writable_file(a.out, "--out");
  DICE_REQUIRE(a.overwrite || !fs::exists(a.out), "--out ", a.out,
               " already exists; pass --overwrite to replace it (it is kept until the new one is whole).");
  auto lock = run_dir::lock_file(a.out, "the output " + a.out);
  auto cfg = load_judge_config(a.config);
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
  log::info("judge: ", jobs.size(), " candidates, ", tasks.size(), " tasks");
  auto line_of = [&](size_t i, const judge::Verdict& v) {
    nlohmann::json j = v;
    j["sample_id"] = cands[i].sample_id;
    j["reward"] = judge::reward(v, kind, cfg.tau);
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  // Each verdict is appended to <out>.partial as it is final (completion order, with its input
  // line number): a run that dies or cannot write --out at the end leaves them there.
  const std::string partial = a.out + ".partial";
  std::FILE* part = std::fopen(partial.c_str(), "w");
  DICE_REQUIRE(part != nullptr, "cannot write ", partial, ": ", std::strerror(errno));
  std::string part_error;
  Timer timer;
  log::Progress bar("judge", static_cast<long>(jobs.size()));
  long judged = 0;
  std::map<int64_t, judge::Verdict> by_key;
  {
    judge::JudgeQueue queue(judge, [&](int64_t key, const judge::Verdict& v) {
      bar.update(++judged);
      nlohmann::json rec = nlohmann::json::parse(line_of(static_cast<size_t>(key), v));
      rec["candidate_line"] = key + 1;
      const std::string line = rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      if (part_error.empty() && (std::fwrite(line.data(), 1, line.size(), part) != line.size() || std::fflush(part) != 0))
        part_error = std::strerror(errno);
    });
    for (size_t i = 0; i < jobs.size(); ++i) queue.submit(static_cast<int64_t>(i), jobs[i]);
    by_key = queue.drain();
  }
  std::fclose(part);
  bar.finish();
  if (!part_error.empty()) log::warn("judge: could not stream verdicts to ", partial, " (", part_error, ")");
  std::vector<judge::Verdict> verdicts;
  for (size_t i = 0; i < jobs.size(); ++i) verdicts.push_back(by_key.at(static_cast<int64_t>(i)));
  double wall = timer.elapsed_s();

  std::string text;
  std::map<std::string, int> classes;
  int correct = 0, hits = 0, reused = 0;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    text += line_of(i, verdicts[i]);
    classes[judge::failure_name(verdicts[i].failure)]++;
    correct += verdicts[i].correct;
    hits += verdicts[i].cache_hit;
    reused += verdicts[i].reused;
  }
  try {
    fs::write_file_atomic(a.out, text);
  } catch (const Error& e) {
    throw Error(str(e.what(), " The ", verdicts.size(), " verdicts are kept in ", partial, " (in completion order)."));
  }
  std::remove(partial.c_str());
  std::string hist;
  for (auto& [k, n] : classes) hist += str(" ", k, "=", n);
  log::info("judge: ", correct, "/", verdicts.size(), " correct, ", hits, " build cache hits, ", reused, " verdicts reused, ", wall, " s (",
            verdicts.empty() ? 0.0 : 60.0 * verdicts.size() / wall, " candidates/min); classes:", hist);
  log::info("judge: extensions: ", judge.fast_builds(), " built by the fast builder, ", judge.plain_builds(),
            " by the plain build (", judge.build_fallbacks(), " of them handed over by the fast builder)");
  log::info("judge: verdicts written to ", a.out);
}

void setup_judge(CLI::App& cmd) {
  auto a = std::make_shared<JudgeArgs>();
  a->config.add_to(cmd);
  cmd.add_option("--tasks", a->tasks, "task set (JSONL)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--candidates", a->candidates, "candidates (JSONL: task_id, response or code, sample_id)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--out", a->out, "verdicts (JSONL)")->required();
  cmd.add_flag("--overwrite", a->overwrite, "replace an existing --out");
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_SUBCOMMAND("judge", "evaluate candidate kernels against their tasks and write verdicts", setup_judge);

}  // namespace dice::app
