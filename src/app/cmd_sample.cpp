// `dice sample`: generate responses from an HF model folder or a dice checkpoint.
//   dice/rollout/sampler.h   the batched block-diffusion sampler and its config
//   dice/model/transformer.h the model (HF folder loader)
//   dice/ckpt/checkpoint.h   checkpoint weights (model.h5)
//   dice/text/*              tokenizer, chat framing, task prompt templates
//   dice/judge/task.h        task files (--tasks)
#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dice/ckpt/checkpoint.h"
#include "dice/config/config.h"
#include "dice/judge/task.h"
#include "dice/model/config.h"
#include "dice/model/transformer.h"
#include "dice/rollout/sampler.h"
#include "dice/text/chat.h"
#include "dice/train/sample_runs.h"
#include "dice/train/task_prompt.h"
#include "dice/text/tokenizer.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/run_dir.h"
#include "dice/train/model_source.h"
#include "dice/util/timer.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct SampleFileConfig {
  rollout::SamplerConfig sampler;
  template <class V> void visit(V& v) { v("sampler", sampler, "block-diffusion sampler"); }
};

struct SampleArgs {
  ConfigArgs config;
  std::string model;
  std::string tokenizer;
  std::string prompts;
  std::string tasks;
  std::string prompt_template;
  std::string out;
  std::string device = "auto";
  std::string dtype = "auto";
  int64_t samples = 1;
  bool raw = false;
  bool overwrite = false;
};

struct Item {
  std::string id;
  std::string text;  // the prompt as given (before chat framing)
};

std::vector<Item> read_prompts(const std::string& path) {
  const std::string body = fs::read_file(path);
  std::vector<Item> items;
  const bool jsonl = path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl";
  size_t start = 0, line_no = 0;
  while (start <= body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string::npos) end = body.size();
    std::string line = body.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (end == body.size()) break;
      continue;
    }
    if (jsonl) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw Error(str(path, ":", line_no, ": not valid JSON (", e.what(), ")."));
      }
      DICE_REQUIRE(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), path, ":", line_no,
                   ": each line needs a \"prompt\" string.");
      std::string id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>() : std::to_string(items.size());
      items.push_back({id, j["prompt"].get<std::string>()});
    } else {
      items.push_back({std::to_string(items.size()), line});
    }
    if (end == body.size()) break;
  }
  DICE_REQUIRE(!items.empty(), "The prompt file ", path, " holds no prompts.");
  return items;
}

std::vector<Item> task_prompts(const std::string& path, const std::string& template_path) {
  auto tasks = judge::load_tasks(path);
  DICE_REQUIRE(!tasks.empty(), "The task file ", path, " holds no tasks.");
  std::vector<Item> items;
  train::TaskPrompter prompter(template_path);
  for (const auto& t : tasks) items.push_back({t.id, prompter(t, t.infill.has_value())});
  return items;
}

// One output line per record (the format of --out).
std::string record_line(const rollout::SampleRecord& r, const Item& it, int64_t sample, const text::Tokenizer& tok) {
  std::vector<int32_t> resp(r.response_ids.begin(), r.response_ids.end());
  nlohmann::json j;
  j["id"] = it.id;
  j["sample"] = sample;
  j["seq_id"] = r.seq_id;
  j["prompt"] = it.text;
  j["response"] = tok.decode(resp, /*skip_special=*/true);
  j["prompt_ids"] = r.prompt_ids;
  j["response_ids"] = r.response_ids;
  j["step_map"] = r.step_map;
  if (!r.logprobs.empty()) j["logprobs"] = r.logprobs;
  j["stop_reason"] = r.stop_reason;
  j["steps"] = r.steps;
  j["queued_s"] = r.queued_s;
  j["decode_s"] = r.decode_s;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void run(const SampleArgs& a) {
  auto cfg = config::load_file<SampleFileConfig>(a.config.config_path, a.config.sets);
  DICE_REQUIRE(a.prompts.empty() != a.tasks.empty(), "Give exactly one of --prompts FILE or --tasks FILE.");
  DICE_REQUIRE(a.samples > 0, "--samples must be > 0.");
  // Everything a user can get wrong is refused before the model is loaded or any work is done.
  const auto src = train::resolve_model(a.model, "--model");
  const torch::Device device = train::pick_device(a.device, nullptr, "--device");
  const torch::Dtype dtype = a.dtype == "auto" ? train::default_dtype(device)
                                               : (a.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
  run_dir::ensure_writable_file(a.out, "--out");
  DICE_REQUIRE(a.overwrite || !fs::exists(a.out), "--out ", a.out,
               " already exists; pass --overwrite to replace it (it is kept until the new one is whole).");
  auto lock = run_dir::lock_file(a.out, "the output " + a.out);
  auto items = a.tasks.empty() ? read_prompts(a.prompts) : task_prompts(a.tasks, a.prompt_template);

  Timer load_t;
  const std::string tok_dir = a.tokenizer.empty() ? src.dir : a.tokenizer;
  auto tok = text::Tokenizer::from_dir(tok_dir);
  auto model = train::load_policy(src, dtype, device);
  text::check_compatible(tok, model->config().vocab_size, model->config().mask_token_id);
  log::info("sample: loaded ", a.model, " on ", device.str(), " in ", load_t.elapsed_s(), " s");

  std::vector<std::vector<int64_t>> prompts;  // one per prompt; its samples take consecutive noise streams
  for (const auto& it : items) {
    auto ids = tok.encode(a.raw ? it.text : text::chat_prompt(it.text));
    prompts.emplace_back(ids.begin(), ids.end());
  }
  std::vector<train::SampleItem> seqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int64_t g = 0; g < a.samples; ++g) seqs.push_back({&prompts[i], seqs.size()});
  log::info("sample: ", seqs.size(), " sequences (", items.size(), " prompts x ", a.samples, "), config:\n",
            config::dump(config::to_yaml(cfg)));

  rollout::Sampler sampler(model, cfg.sampler);
  // Records are streamed to <out>.partial as each finishes (in completion order): a run that dies
  // or cannot write --out at the end leaves them there. --out itself is written whole, in order.
  const std::string partial = a.out + ".partial";
  std::FILE* part = std::fopen(partial.c_str(), "w");
  DICE_REQUIRE(part != nullptr, "cannot write ", partial, ": ", std::strerror(errno));
  std::string part_error;
  log::Progress bar("sample", static_cast<long>(seqs.size()));
  long done = 0;
  // the sampling path of every sample -> judge run (train/sample_runs.h), without the judge
  const auto records = train::sample_runs(sampler, seqs, [&](size_t i, const rollout::SampleRecord& r) {
    const std::string line = record_line(r, items[i / static_cast<size_t>(a.samples)], static_cast<int64_t>(i) % a.samples, tok);
    if (part_error.empty() && (std::fwrite(line.data(), 1, line.size(), part) != line.size() || std::fflush(part) != 0))
      part_error = std::strerror(errno);
    bar.update(++done);
  });
  std::fclose(part);
  bar.finish();
  if (!part_error.empty()) log::warn("sample: could not stream records to ", partial, " (", part_error, ")");

  std::string body;
  for (size_t i = 0; i < records.size(); ++i)
    body += record_line(records[i], items[i / static_cast<size_t>(a.samples)], static_cast<int64_t>(i) % a.samples, tok);
  try {
    fs::write_file_atomic(a.out, body);
  } catch (const Error& e) {
    throw Error(str(e.what(), " The ", records.size(), " records are kept in ", partial, part_error.empty() ? "" : " (incomplete)",
                    " (in completion order)."));
  }
  std::remove(partial.c_str());
  const auto& s = sampler.last_stats();
  log::info("sample: wrote ", records.size(), " records to ", a.out, "; ", s.response_tokens, " tokens in ", s.wall_s,
            " s (", s.tokens_per_s(), " tok/s, ", s.forwards, " forwards, prefill ", s.prefill_s, " s)");
}

void setup_sample(CLI::App& cmd) {
  auto a = std::make_shared<SampleArgs>();
  a->config.add_to(cmd);
  cmd.add_option("--model", a->model, "HF model folder or dice checkpoint directory")->required();
  cmd.add_option("--tokenizer", a->tokenizer, "folder with tokenizer.json (default: the model folder)");
  cmd.add_option("--prompts", a->prompts, "prompts: .txt (one per line) or .jsonl (\"prompt\", optional \"id\")");
  cmd.add_option("--tasks", a->tasks, "task JSONL: prompts rendered from the prompt template");
  cmd.add_option("--prompt-template", a->prompt_template, "template file for --tasks (default: configs/prompts/)");
  cmd.add_option("--out", a->out, "output JSONL")->required();
  cmd.add_option("--samples", a->samples, "responses per prompt");
  cmd.add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  cmd.add_option("--dtype", a->dtype, "auto | bfloat16 | float32")->check(CLI::IsMember({"auto", "bfloat16", "float32"}));
  cmd.add_flag("--overwrite", a->overwrite, "replace an existing --out");
  cmd.add_flag("--raw", a->raw, "feed prompts as they are (no chat framing)");
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_SUBCOMMAND("sample", "generate responses (with step maps) from a model folder or checkpoint", setup_sample);

}  // namespace dice::app
