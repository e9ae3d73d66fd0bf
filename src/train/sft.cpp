// `dice sft`: data, noise, the block-diffusion loss and the data-parallel loop (see sft.h).
#include "dice/train/sft.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "dice/ckpt/checkpoint.h"
#include "dice/ckpt/hf.h"
#include "dice/dist/comm.h"
#include "dice/judge/task.h"
#include "dice/model/config.h"
#include "dice/model/masks.h"
#include "dice/text/chat.h"
#include "dice/train/eval_runner.h"
#include "dice/train/master_weights.h"
#include "dice/train/model_source.h"
#include "dice/train/rl_config.h"
#include "dice/train/run_context.h"
#include "dice/train/run_plan.h"
#include "dice/train/task_prompt.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/home.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::train {
using nlohmann::json;

// ---- config ----

void SftOptimConfig::validate() const {
  DICE_REQUIRE(lr > 0, "optim.lr must be positive, got ", lr, ".");
  DICE_REQUIRE(warmup_ratio >= 0 && warmup_ratio < 1, "optim.warmup_ratio must be in [0, 1), got ", warmup_ratio, ".");
  DICE_REQUIRE(examples_per_step > 0, "optim.examples_per_step must be positive, got ", examples_per_step, ".");
  DICE_REQUIRE(micro_batch_tokens > 0, "optim.micro_batch_tokens must be positive, got ", micro_batch_tokens, ".");
  DICE_REQUIRE(pack_tokens >= 0, "optim.pack_tokens must be >= 0 (0: data.max_tokens), got ", pack_tokens, ".");
  DICE_REQUIRE(attn_chunk > 0, "optim.attn_chunk must be positive, got ", attn_chunk, ".");
  DICE_REQUIRE(logit_chunk > 0, "optim.logit_chunk must be positive, got ", logit_chunk, ".");
}

rl::ScoreOptions SftOptimConfig::scoring() const {
  rl::ScoreOptions so;
  so.fast = fast;
  so.attn_chunk = attn_chunk;
  so.logit_chunk = logit_chunk;
  so.checkpoint = checkpoint_layers;
  return so;
}

void SftRunConfig::validate() const {
  DICE_REQUIRE(!model.empty(), "model is not set: give an HF folder or checkpoint (model: ... or --model).");
  DICE_REQUIRE(!data.path.empty(), "data.path is not set: give the SFT examples (JSON / JSONL, or a task JSONL).");
  DICE_REQUIRE(data.max_tokens > 0, "data.max_tokens must be positive, got ", data.max_tokens, ".");
  DICE_REQUIRE(epochs > 0, "epochs must be positive, got ", epochs, ".");
  DICE_REQUIRE(max_steps >= 0, "max_steps must be >= 0 (0: every epoch), got ", max_steps, ".");
  DICE_REQUIRE(noise_eps > 0 && noise_eps < 1, "noise_eps must be in (0, 1), got ", noise_eps, ".");
  DICE_REQUIRE(ckpt.every > 0, "ckpt.every must be positive, got ", ckpt.every, ".");
  DICE_REQUIRE(ckpt.keep_last >= 0, "ckpt.keep_last must be >= 0, got ", ckpt.keep_last, ".");
  DICE_REQUIRE(dist.bucket_mb > 0, "dist.bucket_mb must be positive, got ", dist.bucket_mb, ".");
  DICE_REQUIRE(dist.timeout_s > 0, "dist.timeout_s must be positive, got ", dist.timeout_s, ".");
  optim.validate();
}

bool sft_key_affects_results(const std::string& k) {
  // (ckpt_every, keep_last, timeout_s, optim.bucket_mb: the same knobs' names in runs of earlier releases)
  static const std::vector<std::string> neutral = {"out",       "max_steps", "ckpt.",     "dist.",
                                                   "ckpt_every", "keep_last", "timeout_s", "optim.bucket_mb"};
  if (k.rfind("fault.", 0) == 0) return false;
  return std::none_of(neutral.begin(), neutral.end(), [&](const std::string& n) {
    return n.back() == '.' ? k.rfind(n, 0) == 0 : k == n;
  });
}

// ---- data ----

namespace {

std::string string_field(const json& rec, const char* key, const std::string& where, bool required) {
  if (!rec.contains(key)) {
    DICE_REQUIRE(!required, where, ": the record has no '", key, "' field.");
    return "";
  }
  DICE_REQUIRE(rec[key].is_string(), where, ": '", key, "' must be a string, it is ", rec[key].type_name(), ".");
  return rec[key].get<std::string>();
}

SftText pair_of(const json& rec, const std::string& where) {
  DICE_REQUIRE(rec.is_object(), where, ": each record must be a JSON object, this one is ", rec.type_name(), ".");
  SftText t;
  if (rec.contains("prompt") || rec.contains("response")) {
    t.prompt = string_field(rec, "prompt", where, true);
    t.response = string_field(rec, "response", where, true);
  } else if (rec.contains("instruction") || rec.contains("output")) {
    t.prompt = string_field(rec, "instruction", where, true);
    const std::string input = string_field(rec, "input", where, false);
    if (!input.empty()) t.prompt += "\n\n" + input;
    t.response = string_field(rec, "output", where, true);
  } else {
    throw Error(str(where, ": a record needs {prompt, response} or alpaca's {instruction, input, output}."));
  }
  DICE_REQUIRE(!t.response.empty(), where, ": the response is empty.");
  return t;
}

std::vector<SftText> read_pairs(const std::string& path) {
  const std::string text = fs::read_file(path);
  std::vector<SftText> out;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {  // one JSON array
    json arr;
    try {
      arr = json::parse(text);
    } catch (const json::exception& e) {
      throw Error(str(path, " is not valid JSON: ", e.what()));
    }
    for (size_t i = 0; i < arr.size(); ++i) out.push_back(pair_of(arr[i], str(path, ": record ", i + 1)));
    return out;
  }
  fs::for_each_line(path, [&](int line, const std::string& l) {
    if (l.find_first_not_of(" \t\r") == std::string::npos) return;
    json rec;
    try {
      rec = json::parse(l);
    } catch (const json::exception& e) {
      throw Error(str(path, ":", line, ": not a JSON object: ", e.what()));
    }
    out.push_back(pair_of(rec, str(path, ":", line)));
  });
  return out;
}

std::vector<SftText> read_task_solutions(const SftDataConfig& cfg, const std::string& path) {
  auto tasks = judge::load_tasks(path);
  DICE_REQUIRE(cfg.max_tasks >= 0, "data.max_tasks must be >= 0, got ", cfg.max_tasks);
  if (cfg.max_tasks > 0 && static_cast<int64_t>(tasks.size()) > cfg.max_tasks) tasks.resize(cfg.max_tasks);
  DICE_REQUIRE(!cfg.prompt_kinds.empty(), "data.prompt_kinds is empty (give end_to_end and/or infill)");
  for (const auto& k : cfg.prompt_kinds)
    DICE_REQUIRE(k == "end_to_end" || k == "infill", "data.prompt_kinds: '", k, "' is not end_to_end or infill");
  TaskPrompter e2e(cfg.prompt_template), infill(cfg.infill_template);
  auto fenced = [](std::string code) {
    if (code.back() != '\n') code += '\n';
    return "```python\n" + code + "```";
  };
  std::vector<SftText> out;
  std::vector<std::string> missing;
  for (const auto& t : tasks) {
    if (t.solution.empty()) {
      missing.push_back(t.id);
      continue;
    }
    for (const auto& kind : cfg.prompt_kinds) {
      if (kind == "infill" && !t.infill) continue;  // a task without an infill split: end-to-end only
      const std::string prompt = kind == "infill" ? infill(t, true) : e2e(t, false);
      auto answer = [&](const std::string& code, const char* what) {
        if (kind != "infill" || cfg.answer != "middle") return fenced(code);
        auto middle = infill_middle(t, code);
        DICE_REQUIRE(middle.has_value(), path, ": task '", t.id, "': its ", what,
                     " does not begin with the infill prefix and end with the suffix, so it has no middle to "
                     "train on (data.answer: middle)");
        return *middle;
      };
      out.push_back({prompt, answer(t.solution, "solution")});
      if (cfg.wrong_solutions)
        for (const auto& w : t.wrong_solutions) out.push_back({prompt, answer(w.code, "wrong twin")});
    }
  }
  DICE_REQUIRE(missing.empty(), path, ": ", missing.size(), " of ", tasks.size(),
               " tasks have no solution to train on, e.g. '", missing[0], "'. Give tasks with solutions, or pairs.");
  return out;
}

}  // namespace

std::vector<SftText> read_sft_texts(const SftDataConfig& cfg) {
  const std::string path = util::in_home(cfg.path);
  DICE_REQUIRE(fs::exists(path), "data.path ", cfg.path, " does not exist.");
  std::string format = cfg.format;
  if (format == "auto") {  // tasks when the first record is a task (has `reference`)
    format = "pairs";
    std::optional<std::string> first;
    fs::for_each_line(path, [&](int, const std::string& l) {
      if (!first && l.find_first_not_of(" \t\r") != std::string::npos) first = l;
    });
    try {
      if (first) {
        const auto j = json::parse(*first);
        if (j.is_object() && j.contains("reference")) format = "tasks";
      }
    } catch (const json::exception&) {  // a JSON array, or malformed: read_pairs says which
    }
  }
  auto out = format == "tasks" ? read_task_solutions(cfg, path) : read_pairs(path);
  DICE_REQUIRE(!out.empty(), "data.path ", cfg.path, " holds no examples.");
  return out;
}

SftExample encode_sft_example(const SftText& t, const text::Tokenizer& tok, int64_t block_size, bool think_prefix) {
  SftExample ex;
  auto p = tok.encode(text::chat_prompt(t.prompt));
  ex.ids.assign(p.begin(), p.end());
  ex.prompt_len = ex.size();
  auto r = tok.encode((think_prefix ? "<think>\n\n</think>\n\n" : "") + t.response, /*allow_special=*/false);
  ex.ids.insert(ex.ids.end(), r.begin(), r.end());
  ex.ids.push_back(tok.im_end_id());
  while (ex.size() % block_size != 0) ex.ids.push_back(tok.endoftext_id());
  return ex;
}

std::vector<std::vector<int64_t>> pack_rows(const std::vector<int64_t>& lengths, int64_t row_tokens) {
  std::vector<std::vector<int64_t>> rows;
  int64_t used = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    DICE_CHECK(lengths[i] <= row_tokens, "example of ", lengths[i], " tokens does not fit a row of ", row_tokens);
    if (rows.empty() || used + lengths[i] > row_tokens) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(static_cast<int64_t>(i));
    used += lengths[i];
  }
  return rows;
}

namespace {
// splitmix64: independent, well-mixed streams from (seed, a, b).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t stream_seed(uint64_t seed, uint64_t tag, int64_t a, int64_t b) {
  return mix(mix(mix(seed ^ tag) + static_cast<uint64_t>(a)) + static_cast<uint64_t>(b));
}
// Uniform double in [0, 1) from 53 bits (the same on every platform, unlike std distributions).
double uniform01(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }
}  // namespace

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 g(stream_seed(seed, 0x5f7, epoch, 0));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates with our own bounded draw
    const auto j = static_cast<int64_t>(uniform01(g) * static_cast<double>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(std::min(j, i))]);
  }
  return order;
}

SftNoise sft_noise(int64_t response_len, double eps, uint64_t seed, int64_t epoch, int64_t example) {
  SftNoise n;
  std::mt19937_64 g(stream_seed(seed, 0x401e, epoch, example));
  n.p = (1 - eps) * uniform01(g) + eps;
  n.masked.assign(static_cast<size_t>(response_len), 0);
  if (response_len == 0) return n;
  for (int attempt = 0; attempt < 10; ++attempt) {
    int64_t count = 0;
    for (auto& m : n.masked) count += (m = uniform01(g) < n.p ? 1 : 0);
    if (count > 0) return n;
  }
  n.masked[static_cast<size_t>(std::min<int64_t>(response_len - 1, static_cast<int64_t>(uniform01(g) * response_len)))] = 1;
  return n;
}

// Noisy tokens of an example: from the start of the block holding its first response token (the
// noisy copies of blocks that are all prompt feed no target: only their own block's noisy tokens
// see them).
int64_t noisy_start(const SftExample& ex, int64_t block_size) { return ex.prompt_len / block_size * block_size; }

SftBatch make_sft_batch(const std::vector<std::vector<const SftExample*>>& rows,
                        const std::vector<std::vector<const SftNoise*>>& noise, int64_t block_size, int64_t pad_id,
                        int64_t mask_id, torch::Device device, const rl::ScoreOptions& so) {
  SftBatch b;
  b.rows = static_cast<int64_t>(rows.size());
  int64_t Nn = 0, Nc = 0;  // the longest row's noisy and clean parts
  for (const auto& r : rows) {
    int64_t nn = 0, nc = 0;
    for (const auto* e : r) {
      nc += e->size();
      nn += e->size() - noisy_start(*e, block_size);
    }
    Nn = std::max(Nn, nn);
    Nc = std::max(Nc, nc);
  }
  const int64_t B = b.rows, T = Nn + Nc;
  b.row_tokens = T;
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto ids = torch::full({B, T}, pad_id, i64), pos = torch::zeros({B, T}, i64), seg = torch::full({B, T}, -1, i64);
  auto blk = torch::zeros({B, T}, i64);  // blocks numbered from the example's offset in the row
  auto noisy = torch::zeros({B, T}, torch::kBool);
  noisy.narrow(1, 0, Nn).fill_(true);
  auto ia = ids.accessor<int64_t, 2>(), pa = pos.accessor<int64_t, 2>(), sa = seg.accessor<int64_t, 2>();
  auto ba = blk.accessor<int64_t, 2>();
  std::vector<int64_t> at, tgt;
  std::vector<double> w;
  for (int64_t r = 0; r < B; ++r) {
    int64_t off = 0, noff = 0;  // offsets of the example in the row's clean and noisy parts
    for (size_t e = 0; e < rows[r].size(); ++e) {
      const SftExample& ex = *rows[r][e];
      const SftNoise& nz = *noise[r][e];
      const int64_t j0 = noisy_start(ex, block_size);
      for (int64_t j = 0; j < ex.size(); ++j) {
        const int64_t id = ex.ids[static_cast<size_t>(j)], block = (off + j) / block_size;  // off: whole blocks
        const int64_t c = Nn + off + j;  // clean copy
        ia[r][c] = id;
        pa[r][c] = j;
        sa[r][c] = static_cast<int64_t>(e);
        ba[r][c] = block;
        if (j < j0) continue;
        const int64_t t = noff + j - j0;  // noisy copy
        const bool masked = j >= ex.prompt_len && nz.masked[static_cast<size_t>(j - ex.prompt_len)];
        ia[r][t] = masked ? mask_id : id;
        pa[r][t] = j;
        sa[r][t] = static_cast<int64_t>(e);
        ba[r][t] = block;
        if (masked) {
          at.push_back(r * T + t);
          tgt.push_back(id);
          w.push_back(1.0 / nz.p);
        }
      }
      off += ex.size();
      noff += ex.size() - j0;
    }
  }
  // The rule of model::sft_mask over this layout (masks.h): noisy -> noisy of its block and clean
  // of earlier blocks, clean -> clean of its and earlier blocks, examples apart.
  const model::TokenLayout lay{seg, blk, noisy, torch::Tensor()};
  if (so.fast) b.sparse = std::make_shared<model::SparseAttention>(model::block_diffusion_plan(lay, so.attn_chunk, device));
  else b.mask = model::block_diffusion_mask(lay, lay, /*self_attend=*/true).to(device);
  b.ids = ids.to(device);
  b.positions = pos.to(device);
  b.target_at = torch::tensor(at, i64).to(device);
  b.targets = torch::tensor(tgt, i64).to(device);
  b.weights = torch::tensor(w, torch::TensorOptions().dtype(torch::kFloat64)).to(device);
  return b;
}

SftLoss sft_loss(model::Transformer& m, const SftBatch& b, const rl::ScoreOptions& so) {
  model::ForwardArgs fa;
  fa.ids = b.ids;
  fa.positions = b.positions;
  torch::Tensor ce;
  if (b.sparse) {  // as the learner's fast path: no N x N mask, no full-vocabulary logits
    fa.sparse = b.sparse.get();
    fa.checkpoint = so.checkpoint;
    fa.train_fused = so.fused;
    auto h = m->hidden(fa);
    auto h_NH = h.reshape({-1, h.size(-1)}).index_select(0, b.target_at);
    ce = -rl::chunked_token_logprobs(h_NH, m->lm_head_weight(), b.targets, so.logit_chunk);
  } else {
    DICE_REQUIRE(b.mask.defined(), "sft_loss: the batch has neither a mask nor a sparse plan.");
    fa.mask = b.mask;
    fa.logits_at = b.target_at;
    auto logits = m->forward(fa).to(torch::kFloat32);  // [N, vocab]
    ce = torch::nn::functional::cross_entropy(
        logits, b.targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  }
  SftLoss out;
  out.weighted_sum = (ce.to(torch::kFloat64) * b.weights).sum();
  out.ce_sum = ce.detach().to(torch::kFloat64).sum().item<double>();
  return out;
}

// ---- the run ----

namespace {

// One `dice sft` invocation on this rank.
class SftRun {
 public:
  SftRun(const SftRunConfig& cfg, const std::string& resume, const std::string& yaml, const dist::World& world);
  SftResult run();

 private:
  json step(int64_t step);
  std::string checkpoint(int64_t step);

  const SftRunConfig& cfg_;
  const dist::World& world_;
  RunContext ctx_;  // model, tokenizer, device, run directory, metrics
  std::optional<MasterWeights> weights_;  // made once the master's weights are loaded
  std::unique_ptr<dist::Comm> comm_;
  rl::ScoreOptions score_;
  std::vector<SftExample> examples_;
  int64_t dropped_ = 0, steps_per_epoch_ = 0, total_steps_ = 0, warmup_ = 0, start_step_ = 0;
  int64_t block_ = 4, pad_id_ = 0, mask_id_ = 0, pack_ = 0;
  SftResult result_;
};

SftRun::SftRun(const SftRunConfig& cfg, const std::string& resume, const std::string& yaml, const dist::World& world)
    // the config is validated before ctx_ looks at the model
    : cfg_((cfg.validate(), cfg)), world_(world), ctx_(cfg.model, cfg.device, world) {
  // ---- everything a user can get wrong is refused here, before any work (the model, its
  // tokenizer and the device in ctx_) ----
  const auto& mcfg = ctx_.model_config();
  const auto& tok = ctx_.tokenizer();
  block_ = mcfg.block_size;
  mask_id_ = mcfg.mask_token_id;
  pad_id_ = tok.endoftext_id();
  pack_ = cfg.optim.pack_tokens > 0 ? cfg.optim.pack_tokens : cfg.data.max_tokens;
  score_ = cfg.optim.scoring();
  DICE_REQUIRE(pack_ >= cfg.data.max_tokens, "optim.pack_tokens ", pack_, " is shorter than data.max_tokens ",
               cfg.data.max_tokens, ": the longest kept example would not fit a row.");
  const int64_t cap = std::min(cfg.data.max_tokens, mcfg.max_position_embeddings);
  for (const auto& t : read_sft_texts(cfg.data)) {
    auto ex = encode_sft_example(t, tok, block_, cfg.data.think_prefix);
    if (ex.size() > cap) {
      ++dropped_;
      continue;
    }
    examples_.push_back(std::move(ex));
  }
  DICE_REQUIRE(!examples_.empty(), "every one of the ", dropped_, " examples in ", cfg.data.path, " is longer than ",
               cap, " tokens (data.max_tokens ", cfg.data.max_tokens, ", the model's max_position_embeddings ",
               mcfg.max_position_embeddings, "); raise data.max_tokens or shorten the examples.");
  const auto n = static_cast<int64_t>(examples_.size());
  steps_per_epoch_ = (n + cfg.optim.examples_per_step - 1) / cfg.optim.examples_per_step;
  total_steps_ = steps_per_epoch_ * cfg.epochs;
  warmup_ = static_cast<int64_t>(std::ceil(cfg.optim.warmup_ratio * static_cast<double>(total_steps_)));
  // What the examples are (data, template, think prefix, tokenizer, cut-off: all of it ends up here),
  // recorded in the run directory's fingerprint: a resume on other examples is refused.
  hash::Sha256 digest;
  for (const auto& ex : examples_) {
    digest.update(&ex.prompt_len, sizeof(ex.prompt_len));
    const int64_t len = ex.size();
    digest.update(&len, sizeof(len));
    digest.update(ex.ids.data(), ex.ids.size() * sizeof(int32_t));
  }
  const run_dir::Fingerprint inputs = {{"examples", digest.hex_digest()}, {"about.examples", cfg.data.path}};
  ctx_.plan(cfg.out, resume, yaml, sft_key_affects_results, inputs);
  const std::string& resume_from = ctx_.resume_from();
  const torch::Device device = ctx_.device();

  // ---- the model: fp32 master weights, a compute-dtype copy when that differs ----
  model::Transformer master(mcfg, torch::kFloat32, device);
  load_into(master, ctx_.start_weights(), ctx_.start_dir());
  if (ctx_.resuming()) {
    const auto st = ckpt::load_state(resume_from);
    DICE_REQUIRE(st.stage == "sft", "--resume ", resume_from, " is a checkpoint of stage '", st.stage,
                 "', not of an SFT run; start SFT from it with --model instead.");
    start_step_ = st.step;
  }
  const bool z1 = cfg.optim.zero1;
  MasterWeightsOptions wo;
  wo.compute_dtype = compute_dtype_for(cfg.optim.compute_dtype, device, torch::kFloat32);
  wo.adam = {cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  wo.zero1 = z1;
  wo.shard = z1 ? world.rank() : 0;
  wo.shards = z1 ? world.size() : 1;
  weights_.emplace(master, wo);
  if (ctx_.resuming()) {
    const auto shards = ckpt::optim_ranks(resume_from);
    const int want = z1 ? world.size() : 1;
    DICE_REQUIRE(static_cast<int>(shards.size()) == want, "--resume ", resume_from, " holds ", shards.size(),
                 " optimizer shard(s); this run needs ", want, " (optim.zero1 ", z1 ? "on" : "off", " over ",
                 world.size(), " rank(s)). Resume with the rank count and optim.zero1 it was written with.");
    weights_->optimizer().load(ckpt::load_optim(resume_from, z1 ? world.rank() : 0));
  }
  comm_ = dist::make_comm(world.role_comm(), device, {"learners", "learner", cfg.dist.timeout_s});

  ctx_.open_outputs(start_step_);  // later steps (after the checkpoint) run again
  if (world.is_root()) {
    log::info(log::format("sft: %d rank(s) on %s; %lld examples (%lld dropped as longer than %lld tokens), %lld steps of %lld "
                "examples (%lld epochs); %s",
                world.size(), device.str().c_str(), static_cast<long long>(n), static_cast<long long>(dropped_),
                static_cast<long long>(cap), static_cast<long long>(total_steps_),
                static_cast<long long>(cfg.optim.examples_per_step), static_cast<long long>(cfg.epochs),
                resume_from.empty() ? "fresh start" : ("resuming from " + resume_from).c_str()));
  }
  world.barrier();
}

SftResult SftRun::run() {
  const int64_t last = cfg_.max_steps > 0 ? std::min(cfg_.max_steps, total_steps_) : total_steps_;
  result_.first_step = start_step_ + 1;
  result_.total_steps = total_steps_;
  Timer clock;  // this start's steps, for the ETA
  for (int64_t s = start_step_ + 1; s <= last; ++s) {
    inject_fault(cfg_.fault, s, world_);
    json rec = step(s);
    std::string saved;
    if (s % cfg_.ckpt.every == 0 || s == last) saved = checkpoint(s);
    result_.last_step = s;
    if (!saved.empty()) result_.last_checkpoint = saved;
    if (!world_.is_root()) continue;
    if (!saved.empty()) rec["checkpoint"] = saved;
    ctx_.metrics().write(rec);
    result_.ce_masked.push_back(rec["ce_masked"].get<double>());
    log::info(log::format("step %lld/%lld [epoch %lld] loss %.4f ce_masked %.4f masked %lld/%lld lr %.3g gnorm %.3g | %.0f tok/s "
                "%.2fs | %s%s",
                static_cast<long long>(s), static_cast<long long>(total_steps_), static_cast<long long>(rec["epoch"]),
                rec["loss"].get<double>(), rec["ce_masked"].get<double>(), static_cast<long long>(rec["masked_tokens"]),
                static_cast<long long>(rec["label_tokens"]), rec["lr"].get<double>(), rec["grad_norm"].get<double>(),
                rec["tokens_per_s"].get<double>(), rec["time_step_s"].get<double>(),
                log::eta(clock.elapsed_s(), static_cast<long>(s - start_step_), static_cast<long>(last - start_step_)).c_str(),
                saved.empty() ? "" : (" | saved " + saved).c_str()));
  }
  world_.barrier();
  return result_;
}

json SftRun::step(int64_t s) {
  Timer t_step;
  const int64_t epoch = (s - 1) / steps_per_epoch_, k = (s - 1) % steps_per_epoch_;
  const auto order = epoch_order(static_cast<int64_t>(examples_.size()), cfg_.seed, epoch);
  const int64_t E = cfg_.optim.examples_per_step;
  const int64_t begin = k * E, end = std::min<int64_t>(begin + E, static_cast<int64_t>(order.size()));
  // Every rank knows every example: the normaliser needs no message.
  double label_tokens = 0;
  std::vector<int64_t> mine;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t ex = order[static_cast<size_t>(i)];
    label_tokens += static_cast<double>(examples_[ex].size() - examples_[ex].prompt_len);
    if ((i - begin) % world_.size() == world_.rank()) mine.push_back(ex);
  }
  std::vector<SftNoise> noise;
  std::vector<int64_t> lengths;
  for (int64_t ex : mine) {
    noise.push_back(sft_noise(examples_[ex].size() - examples_[ex].prompt_len, cfg_.noise_eps, cfg_.seed, epoch, ex));
    lengths.push_back(examples_[ex].size());
  }
  const auto rows = pack_rows(lengths, pack_);

  weights_->zero_grads();
  weights_->refresh_compute();  // the compute copy follows the master (changed by the last update or a load)
  auto& cm = weights_->compute_model();
  double loss = 0, ce = 0, masked = 0, row_tokens = 0;
  size_t r = 0;
  while (r < rows.size()) {  // micro-batches: rows while their padded size fits micro_batch_tokens
    std::vector<std::vector<const SftExample*>> mb;
    std::vector<std::vector<const SftNoise*>> mn;
    int64_t longest = 0;
    while (r < rows.size()) {
      int64_t len = 0;
      for (int64_t j : rows[r]) len += lengths[static_cast<size_t>(j)];
      const int64_t longer = std::max(longest, len);
      if (!mb.empty() && longer * static_cast<int64_t>(mb.size() + 1) > cfg_.optim.micro_batch_tokens) break;
      longest = longer;
      mb.emplace_back();
      mn.emplace_back();
      for (int64_t j : rows[r]) {
        mb.back().push_back(&examples_[static_cast<size_t>(mine[static_cast<size_t>(j)])]);
        mn.back().push_back(&noise[static_cast<size_t>(j)]);
      }
      ++r;
    }
    const auto batch = make_sft_batch(mb, mn, block_, pad_id_, mask_id_, ctx_.device(), score_);
    auto l = sft_loss(cm, batch, score_);
    auto scaled = l.weighted_sum / label_tokens;
    scaled.backward();
    weights_->accumulate();
    loss += scaled.item<double>();
    ce += l.ce_sum;
    masked += static_cast<double>(batch.targets.size(0));
    row_tokens += static_cast<double>(batch.rows * batch.row_tokens);
  }
  weights_->all_reduce(*comm_);
  const double gnorm = weights_->clip(cfg_.optim.grad_clip);
  const double lr = warmup_ > 0 && s <= warmup_ ? cfg_.optim.lr * static_cast<double>(s) / static_cast<double>(warmup_)
                                                : cfg_.optim.lr;
  weights_->step(lr, *comm_, cfg_.dist.bucket_mb << 20);
  if (ctx_.device().is_cuda()) torch::cuda::synchronize();
  dist::sum_over_ranks(*comm_, {&loss, &ce, &masked, &row_tokens});
  const double secs = t_step.elapsed_s();
  return json{{"step", s},
              {"epoch", epoch + 1},
              {"examples", end - begin},
              {"loss", loss},
              {"ce_masked", masked > 0 ? ce / masked : 0.0},
              {"masked_tokens", static_cast<int64_t>(masked)},
              {"label_tokens", static_cast<int64_t>(label_tokens)},
              {"row_tokens", static_cast<int64_t>(row_tokens)},
              {"lr", lr},
              {"grad_norm", gnorm},
              {"time_step_s", secs},
              {"tokens_per_s", row_tokens / std::max(secs, 1e-9)}};
}

std::string SftRun::checkpoint(int64_t s) {
  ckpt::TrainState ts;
  ts.step = s;
  ts.stage = "sft";
  ts.cursor = s;
  ts.config_yaml = ctx_.yaml();
  const auto so = learner_save_options(*comm_, cfg_.optim.zero1 ? world_.rank() : 0, world_.is_root(),
                                       cfg_.ckpt.keep_last, ctx_.model().dir, ctx_.side_files());
  // With ZeRO-1 each rank writes its shard; without, every rank holds the same state and rank 0
  // writes it. No RNG state: the data order and the noise are functions of (seed, epoch, example).
  return weights_->save_checkpoint(cfg_.out, ts, so);
}

}  // namespace

SftResult run_sft(const SftRunConfig& cfg, const std::string& resume, const std::string& yaml, const dist::World& world) {
  SftRun r(cfg, resume, yaml, world);
  return r.run();
}

}  // namespace dice::train
