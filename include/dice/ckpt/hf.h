#pragma once
// Hugging Face folders <-> checkpoints, and random HF model folders from a model preset.
//
//   import_hf:  HF folder (config.json, model.safetensors or sharded index, tokenizer files)
//               -> <run_dir>/step_<N>/ with model.h5, state.h5 (stage "import") and copies of
//               the side files, so the checkpoint describes itself.
//   export_hf:  checkpoint -> HF folder: safetensors (optionally sharded) + the side files.
//               Tensors keep their dtype; HF -> checkpoint -> HF is bit-exact.
//   init_hf_model: config.json + random weights (the values of model::init_random_weights for
//               the same seed and dtype) + tokenizer files. Weights are generated one shard at a
//               time, so memory stays at about one shard even for the 8B shape.
#include <cstdint>
#include <string>
#include <vector>

#include "dice/model/config.h"

namespace dice::ckpt {

// Files besides the weights that travel with a model: config, generation config, tokenizer.
const std::vector<std::string>& hf_side_files();
// The side files present in the model folder or checkpoint `dir`: hf_side_files() and its remote
// code (every top-level *.py, e.g. SDAR's configuration_sdar.py and modeling_sdar.py, which its
// config.json's auto_map names). Names, not paths. Warns when an auto_map module has no file.
std::vector<std::string> side_files_in(const std::string& dir);

// An existing <run_dir>/step_<N> is refused unless `replace`.
std::string import_hf(const std::string& hf_dir, const std::string& run_dir, int64_t step = 0, bool replace = false);

// A checkpoint without its COMPLETE marker is refused. out_dir is written whole beside itself and
// then put in place: the old folder stays until the new one is whole (a full disk leaves it as it
// was). An out_dir that already holds weights is refused unless `replace`.
// dtype: "auto" writes a checkpoint whose floating tensors are all fp32 (a trained run's master
// weights) in the dtype its config.json names (bfloat16 when it names none), and keeps the stored
// dtypes otherwise (an imported model: HF -> checkpoint -> HF stays bit-exact); "bfloat16",
// "float16", "float32" convert every floating tensor. config.json's torch_dtype says what was written.
void export_hf(const std::string& ckpt_dir, const std::string& out_dir, int64_t max_shard_bytes = 0,
               bool verify = true, bool replace = false, const std::string& dtype = "auto");

// The YAML of configs/models/<preset>.yaml:
//   preset: sdar-1.7b        # optional base (model::ModelConfig::preset); fields below override it
//   tokenizer: data/qwen3    # folder whose tokenizer files are copied into the model folder
//   seed: 0
//   dtype: bf16              # bf16 | fp32
//   max_shard_bytes: 0       # 0: one model.safetensors up to 5 GB, then 5 GB shards
//   model: {hidden_size: 2048, num_hidden_layers: 28, ...}   # any ModelConfig field
struct ModelArch {
  model::ModelConfig cfg;
  template <class V> void visit(V& v) {
    v("model_type", cfg.model_type, "qwen3 (written as qwen3)");
    v("vocab_size", cfg.vocab_size, "vocabulary size (151936 fits the Qwen3 tokenizer)");
    v("hidden_size", cfg.hidden_size, "model width");
    v("intermediate_size", cfg.intermediate_size, "MLP width");
    v("num_hidden_layers", cfg.num_hidden_layers, "transformer layers");
    v("num_attention_heads", cfg.num_attention_heads, "query heads");
    v("num_key_value_heads", cfg.num_key_value_heads, "key/value heads (GQA)");
    v("head_dim", cfg.head_dim, "per-head width");
    v("rms_norm_eps", cfg.rms_norm_eps, "RMSNorm epsilon");
    v("rope_theta", cfg.rope_theta, "RoPE base");
    v("max_position_embeddings", cfg.max_position_embeddings, "longest position");
    v("tie_word_embeddings", cfg.tie_word_embeddings, "lm_head shares the embedding");
    v("block_size", cfg.block_size, "SDAR diffusion block length");
    v("mask_token_id", cfg.mask_token_id, "SDAR mask token");
    v("bos_token_id", cfg.bos_token_id, "begin-of-sequence token");
    v("eos_token_id", cfg.eos_token_id, "end-of-sequence token");
    v("torch_dtype", cfg.torch_dtype, "dtype recorded in config.json");
  }
  void validate() const { cfg.validate(); }
};

struct ModelInitConfig {
  std::string preset;
  std::string tokenizer = "data/qwen3";
  int64_t seed = 0;
  std::string dtype = "bf16";
  int64_t max_shard_bytes = 0;
  ModelArch model;
  template <class V> void visit(V& v) {
    v("preset", preset, "base preset: tiny, sdar-1.7b, sdar-4b, sdar-8b (empty: none)");
    v("tokenizer", tokenizer, "folder with tokenizer.json and tokenizer_config.json");
    v("seed", seed, "random seed of the weights");
    v.choice("dtype", dtype, {"bf16", "fp32"}, "weight dtype");
    v("max_shard_bytes", max_shard_bytes, "safetensors shard size (0: automatic)");
    v("model", model, "architecture (ModelConfig fields)");
  }
};

// Reads the YAML (the preset first, then the file's fields, then --set overrides).
ModelInitConfig load_model_init_config(const std::string& yaml_path, const std::vector<std::string>& sets = {});

// Writes config.json, generation_config.json, weights and the tokenizer files into out_dir.
// max_shard_bytes 0: one model.safetensors when the weights fit in 5 GB, else 5 GB shards.
// Written like export_hf (beside, then put in place; existing weights only with `replace`).
void init_hf_model(const model::ModelConfig& cfg, const std::string& out_dir, uint64_t seed, bool bf16,
                   const std::string& tokenizer_dir, int64_t max_shard_bytes = 0, bool replace = false);

}  // namespace dice::ckpt
