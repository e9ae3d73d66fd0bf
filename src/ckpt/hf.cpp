// HF folder <-> checkpoint conversion and random model folders (see dice/ckpt/hf.h).
#include "dice/ckpt/hf.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include "dice/ckpt/checkpoint.h"
#include "dice/config/config.h"
#include "dice/model/safetensors.h"
#include "dice/util/cleanup.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::ckpt {

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kAutoShardBytes = 5'000'000'000;  // HF's customary 5 GB shards

const std::vector<std::string>& tokenizer_files() {
  static const std::vector<std::string> files = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "vocab.json",     "merges.txt",            "chat_template.jinja",
  };
  return files;
}

// Copies the side files present in `from` into `to`; returns their names.
std::vector<std::string> copy_present(const std::string& from, const std::string& to,
                                      const std::vector<std::string>& names) {
  std::vector<std::string> copied;
  for (const auto& name : names) {
    stdfs::path src = stdfs::path(from) / name;
    if (!stdfs::is_regular_file(src)) continue;
    std::error_code ec;
    stdfs::copy_file(src, stdfs::path(to) / name, stdfs::copy_options::overwrite_existing, ec);
    DICE_REQUIRE(!ec, "cannot copy ", src.string(), " to ", to, ": ", ec.message());
    copied.push_back(name);
  }
  return copied;
}

bool is_weight_file(const std::string& n) {
  bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos && n.size() > 12 &&
               n.compare(n.size() - 12, 12, ".safetensors") == 0;
  return shard || n == "model.safetensors" || n == "model.safetensors.index.json";
}

bool holds_weights(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec))
    if (is_weight_file(e.path().filename().string())) return true;
  return false;
}

// A model folder is written whole beside `out_dir` (out_dir.tmp.<pid>, same file system), then put
// in its place: a failure (a full disk) leaves the old folder as it was and removes the staging.
// Files of the old folder that the new one does not write (a README) are carried over; its old
// weight files are not (they would shadow the new ones).
class StagedFolder {
 public:
  StagedFolder(const std::string& out_dir, bool replace, int64_t need_bytes, const char* what) : out_(out_dir) {
    DICE_REQUIRE(!stdfs::exists(out_dir) || stdfs::is_directory(out_dir), what, " --out ", out_dir, " is a file; pass a folder.");
    DICE_REQUIRE(replace || !holds_weights(out_dir), what, " --out ", out_dir,
                 " already holds a model; pass --replace to replace it (the old one is kept until the new one is whole).");
    stdfs::path parent = stdfs::absolute(out_dir).parent_path();
    std::error_code ec;
    stdfs::create_directories(parent, ec);
    DICE_REQUIRE(stdfs::is_directory(parent), "cannot create ", parent.string(), ": ", ec.message());
    auto space = stdfs::space(parent, ec);
    DICE_REQUIRE(ec || static_cast<int64_t>(space.available) >= need_bytes, what, ": ", parent.string(), " has ",
                 space.available, " bytes free, but the new model needs ", need_bytes,
                 " (the old folder stays until the new one is whole); free space or pick another --out.");
    staged_ = str(stdfs::absolute(out_dir).lexically_normal().string(), ".tmp.", ::getpid());
    fs::remove_tree(staged_);
    stdfs::create_directories(staged_, ec);
    DICE_REQUIRE(stdfs::is_directory(staged_), "cannot create ", staged_, ": ", ec.message());
    scratch_slot_ = cleanup::register_path(staged_);  // removed also on Ctrl-C
  }
  ~StagedFolder() {
    if (!committed_) fs::remove_tree(staged_);
    cleanup::unregister_path(scratch_slot_);
  }
  const std::string& dir() const { return staged_; }
  void commit() {
    std::error_code ec;
    if (stdfs::is_directory(out_)) {
      for (const auto& e : stdfs::directory_iterator(out_, ec)) {
        const auto name = e.path().filename();
        if (is_weight_file(name.string()) || stdfs::exists(stdfs::path(staged_) / name)) continue;
        stdfs::copy(e.path(), stdfs::path(staged_) / name, stdfs::copy_options::recursive, ec);
        DICE_REQUIRE(!ec, "cannot carry ", e.path().string(), " over to the new folder: ", ec.message(),
                     "; the old folder is kept.");
      }
    }
    for (const auto& e : stdfs::directory_iterator(staged_)) fs::fsync_path(e.path().string());
    fs::fsync_path(staged_);
    fs::replace_dir(staged_, out_);
    committed_ = true;
  }

 private:
  std::string out_, staged_;
  bool committed_ = false;
  int scratch_slot_ = -1;
};

int64_t tensor_bytes(const NamedTensors& t) {
  int64_t n = 0;
  for (const auto& [name, v] : t) n += static_cast<int64_t>(v.numel() * v.element_size());
  return n;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Every parameter the config implies must be present with its shape; extras are only warned about.
void check_against_config(const NamedTensors& tensors, const model::ModelConfig& cfg, const std::string& hf_dir) {
  auto shapes = model::parameter_shapes(cfg);
  for (const auto& [name, shape] : shapes) {
    auto it = tensors.find(name);
    DICE_REQUIRE(it != tensors.end(), "HF folder ", hf_dir, " has no tensor '", name,
                 "', which its config.json implies; the weights do not match the config");
    std::vector<int64_t> got(it->second.sizes().begin(), it->second.sizes().end());
    DICE_REQUIRE(got == shape, "HF folder ", hf_dir, ": tensor '", name, "' has shape ", shape_text(got),
                 ", but config.json implies ", shape_text(shape));
  }
  int extra = 0;
  for (const auto& [name, t] : tensors) extra += shapes.count(name) ? 0 : 1;
  if (extra > 0) log::warn("HF folder ", hf_dir, " has ", extra, " tensors its config.json does not describe; kept as is");
}

}  // namespace

const std::vector<std::string>& hf_side_files() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> f = {"config.json", "generation_config.json"};
    for (const auto& t : tokenizer_files()) f.push_back(t);
    return f;
  }();
  return files;
}

std::vector<std::string> side_files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& name : hf_side_files())
    if (stdfs::is_regular_file(stdfs::path(dir) / name)) out.push_back(name);
  std::error_code ec;
  std::vector<std::string> code;
  for (const auto& e : stdfs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.size() > 3 && n.compare(n.size() - 3, 3, ".py") == 0) code.push_back(n);
  }
  std::sort(code.begin(), code.end());
  out.insert(out.end(), code.begin(), code.end());
  // auto_map: {"AutoConfig": "configuration_sdar.SDARConfig", ...}; "repo--module.Class" names another repo
  const std::string cfg = (stdfs::path(dir) / "config.json").string();
  if (stdfs::is_regular_file(cfg)) {
    auto j = json::parse(fs::read_file(cfg), nullptr, false);
    if (j.is_object() && j.contains("auto_map") && j["auto_map"].is_object())
      for (const auto& [k, v] : j["auto_map"].items()) {
        if (!v.is_string()) continue;
        std::string ref = v.get<std::string>();
        if (ref.find("--") != std::string::npos) continue;
        const auto dot = ref.rfind('.');
        const std::string file = (dot == std::string::npos ? ref : ref.substr(0, dot)) + ".py";
        if (std::find(code.begin(), code.end(), file) == code.end())
          log::warn(dir, "/config.json names ", ref, " in auto_map (", k, "), but ", file,
                    " is not there: transformers will not load this model with trust_remote_code");
      }
  }
  return out;
}

std::string import_hf(const std::string& hf_dir, const std::string& run_dir, int64_t step, bool replace) {
  DICE_REQUIRE(stdfs::is_directory(hf_dir), "HF folder ", hf_dir, " does not exist");
  const auto existing = stdfs::path(run_dir) / step_dir_name(step);
  DICE_REQUIRE(replace || !stdfs::exists(existing), "the run folder ", run_dir, " already holds ", existing.string(),
               "; pass --replace to replace it, or another --step or --out.");
  model::ModelConfig cfg = model::ModelConfig::from_hf_dir(hf_dir);
  Timer timer;
  NamedTensors tensors = model::load_safetensors(hf_dir);
  check_against_config(tensors, cfg, hf_dir);
  TrainState state;
  state.step = step;
  state.stage = "import";
  state.metrics_json = json{{"imported_from", stdfs::absolute(hf_dir).lexically_normal().string()}}.dump();
  SaveOptions opts;
  for (const auto& name : side_files_in(hf_dir)) opts.copy_files.push_back((stdfs::path(hf_dir) / name).string());
  std::string dir = save_checkpoint(run_dir, step, tensors, nullptr, state, opts);
  log::info("imported ", tensors.size(), " tensors from ", hf_dir, " into ", dir, " in ", timer.elapsed_s(), " s");
  return dir;
}

void export_hf(const std::string& ckpt_dir, const std::string& out_dir, int64_t max_shard_bytes, bool verify,
               bool replace, const std::string& dtype) {
  DICE_REQUIRE(max_shard_bytes >= 0, "--max-shard-bytes must be >= 0, got ", max_shard_bytes);
  const std::map<std::string, torch::Dtype> dtypes = {
      {"bfloat16", torch::kBFloat16}, {"float16", torch::kHalf}, {"float32", torch::kFloat32}};
  DICE_REQUIRE(dtype == "auto" || dtypes.count(dtype), "--dtype is '", dtype,
               "', but must be auto, bfloat16, float16 or float32.");
  auto problems = check_checkpoint(ckpt_dir, /*verify=*/false);
  DICE_REQUIRE(problems.empty(), "the checkpoint ", ckpt_dir, " cannot be exported: ", problems.empty() ? "" : problems[0],
               ". Export a complete checkpoint (or the run folder: its latest complete one).");
  Timer timer;
  NamedTensors tensors = load_model(ckpt_dir, verify);
  // the dtype to write: config.json's when every floating tensor is fp32 (master weights)
  const std::string cfg_path = ckpt_dir + "/config.json";
  json cfg = stdfs::is_regular_file(cfg_path) ? json::parse(fs::read_file(cfg_path), nullptr, false) : json();
  std::string target = dtype;
  if (target == "auto") {
    bool all_fp32 = true;
    for (const auto& [name, t] : tensors) all_fp32 = all_fp32 && (!t.is_floating_point() || t.scalar_type() == torch::kFloat32);
    const std::string named = cfg.is_object() ? cfg.value("torch_dtype", std::string("bfloat16")) : "bfloat16";
    target = all_fp32 && dtypes.count(named) ? named : all_fp32 ? "bfloat16" : "";
  }
  if (!target.empty()) {
    for (auto& [name, t] : tensors)
      if (t.is_floating_point()) t = t.to(dtypes.at(target));
    if (cfg.is_object()) cfg["torch_dtype"] = target;
  }
  if (max_shard_bytes == 0 && tensor_bytes(tensors) > kAutoShardBytes) max_shard_bytes = kAutoShardBytes;
  StagedFolder staged(out_dir, replace, tensor_bytes(tensors), "ckpt export-hf");
  std::vector<std::string> copied;
  try {
    model::save_hf_weights(staged.dir(), tensors, max_shard_bytes);
    copied = copy_present(ckpt_dir, staged.dir(), side_files_in(ckpt_dir));
    if (!target.empty() && cfg.is_object()) fs::write_file(staged.dir() + "/config.json", cfg.dump(2) + "\n");
  } catch (const std::exception& e) {
    throw Error(str("ckpt export-hf: writing ", out_dir, " failed (", e.what(), "); ",
                    stdfs::exists(out_dir) ? "the old folder is kept as it was." : "nothing was left behind."));
  }
  staged.commit();
  if (std::find(copied.begin(), copied.end(), "config.json") == copied.end())
    log::warn("checkpoint ", ckpt_dir, " has no config.json; ", out_dir, " holds the weights only");
  log::info("exported ", tensors.size(), " tensors from ", ckpt_dir, " to ", out_dir, " in ", timer.elapsed_s(), " s");
}

ModelInitConfig load_model_init_config(const std::string& yaml_path, const std::vector<std::string>& sets) {
  YAML::Node root = config::load_tree(yaml_path, sets);
  ModelInitConfig c;
  if (root.IsMap() && root["preset"] && root["preset"].IsScalar() && !root["preset"].Scalar().empty())
    c.model.cfg = model::ModelConfig::preset(root["preset"].Scalar());
  config::read_value(root, "", c);
  return c;
}

void write_init_files(const model::ModelConfig& cfg, const model::ModelConfig& written,
                      const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& out_dir,
                      uint64_t seed, torch::Dtype dtype, const std::string& tokenizer_dir, int64_t max_shard_bytes,
                      int64_t total_bytes);

// One shard is made in memory at once, each tensor first in fp32: refuse before any work when that
// cannot fit in the memory this machine has available (else the allocation fails mid-way, or the
// kernel's OOM killer ends the process).
void check_memory_for_init(const std::map<std::string, std::vector<int64_t>>& shapes, int64_t elem,
                           int64_t shard_bytes) {
  int64_t largest = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    largest = std::max(largest, n);
  }
  const int64_t need = std::max(shard_bytes, largest * elem) + largest * 4;
  int64_t avail_kb = -1;
  std::ifstream mi("/proc/meminfo");
  for (std::string key; mi >> key;) {
    int64_t v = 0;
    mi >> v;
    if (key == "MemAvailable:") { avail_kb = v; break; }
    mi.ignore(64, '\n');
  }
  if (avail_kb < 0) return;
  DICE_REQUIRE(need <= avail_kb * 1024, "ckpt init: making the weights needs about ", need,
               " bytes of memory at once (the largest shard plus its largest tensor in fp32), but this machine has ",
               avail_kb * 1024, " available; set a smaller --max-shard-bytes, or a smaller model (the largest tensor has ",
               largest, " elements).");
}

void init_hf_model(const model::ModelConfig& cfg, const std::string& out_dir, uint64_t seed, bool bf16,
                   const std::string& tokenizer_dir, int64_t max_shard_bytes, bool replace) {
  cfg.validate();
  for (auto [name, id] : {std::pair<const char*, int64_t>{"mask_token_id", cfg.mask_token_id},
                          {"bos_token_id", cfg.bos_token_id}, {"eos_token_id", cfg.eos_token_id}})
    DICE_REQUIRE(id >= 0 && id < cfg.vocab_size, "model config: ", name, " ", id, " is outside the vocabulary (",
                 cfg.vocab_size, " tokens)");
  DICE_REQUIRE(max_shard_bytes >= 0, "max_shard_bytes must be >= 0, got ", max_shard_bytes);
  if (!tokenizer_dir.empty()) {
    DICE_REQUIRE(stdfs::is_regular_file(stdfs::path(tokenizer_dir) / "tokenizer.json"), "tokenizer folder ",
                 tokenizer_dir, " has no tokenizer.json (set `tokenizer:` in the model config or pass --tokenizer)");
  }
  const torch::Dtype dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  model::ModelConfig written = cfg;
  written.torch_dtype = bf16 ? "bfloat16" : "float32";
  const auto shapes = model::parameter_shapes(cfg);
  const int64_t elem = bf16 ? 2 : 4;
  int64_t total_bytes = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = elem;
    for (int64_t d : shape) n *= d;
    total_bytes += n;
  }
  if (max_shard_bytes == 0 && total_bytes > kAutoShardBytes) max_shard_bytes = kAutoShardBytes;
  check_memory_for_init(shapes, elem, max_shard_bytes > 0 ? std::min(max_shard_bytes, total_bytes) : total_bytes);
  StagedFolder staged(out_dir, replace, total_bytes, "ckpt init");
  try {
    write_init_files(cfg, written, shapes, staged.dir(), seed, dtype, tokenizer_dir, max_shard_bytes, total_bytes);
  } catch (const Error& e) {
    throw Error(str("ckpt init: writing ", out_dir, " failed: ", e.what(), (stdfs::exists(out_dir) ? " The old folder is kept as it was." : "")));
  } catch (const std::exception& e) {  // c10::Error, std::bad_alloc: a shard too large for memory
    throw Error(str("ckpt init: could not create the weights of ", out_dir, " (", e.what(), "); with ", total_bytes,
                    " bytes of weights, set a smaller --max-shard-bytes (each shard is made in memory at once).",
                    (stdfs::exists(out_dir) ? " The old folder is kept as it was." : "")));
  }
  staged.commit();
}

void write_init_files(const model::ModelConfig& cfg, const model::ModelConfig& written,
                      const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& out_dir,
                      uint64_t seed, torch::Dtype dtype, const std::string& tokenizer_dir, int64_t max_shard_bytes,
                      int64_t total_bytes) {
  const bool bf16 = dtype == torch::kBFloat16;
  const int64_t elem = bf16 ? 2 : 4;

  // Shards: greedy in name order, as model::save_hf_weights does.
  std::vector<std::vector<std::string>> shards(1);
  int64_t used = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = elem;
    for (int64_t d : shape) n *= d;
    if (max_shard_bytes > 0 && used > 0 && used + n > max_shard_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(name);
    used += n;
  }

  // Same generator, order and recipe as model::init_random_weights: identical values.
  Timer timer;
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  json weight_map = json::object();
  log::Progress progress("init weights", static_cast<long>(shapes.size()));
  long done = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    NamedTensors shard;
    for (const auto& name : shards[i]) {
      const auto& shape = shapes.at(name);
      torch::Tensor t = shape.size() == 1 ? torch::ones(shape, torch::kFloat32)
                                          : at::normal(0.0, 0.02, shape, gen, torch::TensorOptions().dtype(torch::kFloat32));
      shard[name] = t.to(dtype);
      progress.update(++done);
    }
    std::string file = "model.safetensors";
    if (max_shard_bytes > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      file = buf;
    }
    model::save_safetensors((stdfs::path(out_dir) / file).string(), shard, meta);
    for (const auto& [name, t] : shard) weight_map[name] = file;
  }
  progress.finish();
  if (max_shard_bytes > 0) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    fs::write_file_atomic((stdfs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }

  fs::write_file_atomic((stdfs::path(out_dir) / "config.json").string(), written.to_json());
  json gen_cfg = {{"bos_token_id", cfg.bos_token_id}, {"eos_token_id", cfg.eos_token_id}, {"do_sample", false}};
  fs::write_file_atomic((stdfs::path(out_dir) / "generation_config.json").string(), gen_cfg.dump(2) + "\n");
  if (!tokenizer_dir.empty()) {
    copy_present(tokenizer_dir, out_dir, tokenizer_files());
    // A plain Qwen3 tokenizer has no mask token; SDAR's folders add it as an added token, and so
    // does a random SDAR-shaped model, so the block-diffusion sampler and the tokenizer agree.
    const auto out = stdfs::path(out_dir);
    bool has_mask = false;
    for (const char* f : {"tokenizer_config.json", "added_tokens.json"})
      if (stdfs::is_regular_file(out / f)) {
        std::string text = fs::read_file((out / f).string());
        has_mask = has_mask || text.find("<|MASK|>") != std::string::npos || text.find("<MASK>") != std::string::npos;
      }
    if (!has_mask && !stdfs::exists(out / "added_tokens.json"))
      fs::write_file_atomic((out / "added_tokens.json").string(),
                            json({{"<|MASK|>", cfg.mask_token_id}}).dump(2) + "\n");
  }
  log::info("initialized ", cfg.num_parameters(), " parameters (", total_bytes, " bytes, ", shards.size(),
            " file(s)) in ", timer.elapsed_s(), " s");
}

}  // namespace dice::ckpt
