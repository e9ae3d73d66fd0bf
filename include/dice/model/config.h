#pragma once
// ModelConfig: the architecture of an SDAR / Qwen3 model, read from and written to a Hugging Face
// config.json; presets for the SDAR sizes; random weights with HF parameter names.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dice/model/safetensors.h"

namespace dice::model {

struct ModelConfig {
  std::string model_type = "qwen3";  // "qwen3" or "sdar" on read; written as "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // default hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  int64_t block_size = 4;          // SDAR diffusion block length
  int64_t mask_token_id = 151669;  // SDAR <|MASK|>
  int64_t bos_token_id = 151643;
  int64_t eos_token_id = 151643;   // the first one when config.json lists several
  std::string torch_dtype = "bfloat16";

  // Parse config.json text; `source` names it in errors. Missing required fields, wrong types,
  // non-positive sizes, heads not dividing evenly, unknown model_type -> dice::Error.
  static ModelConfig from_json(const std::string& json_text, const std::string& source = "config.json");
  static ModelConfig from_json_file(const std::string& path);
  static ModelConfig from_hf_dir(const std::string& dir);  // dir/config.json
  // A config.json that transformers' Qwen3ForCausalLM loads (model_type "qwen3",
  // architectures ["Qwen3ForCausalLM"]), plus block_size and mask_token_id.
  std::string to_json() const;
  // "tiny", "sdar-1.7b", "sdar-4b", "sdar-8b"; unknown name -> dice::Error listing the presets.
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  void validate() const;  // throws dice::Error naming the bad field
  int64_t num_parameters() const;
  bool operator==(const ModelConfig& o) const;
};

// HF parameter name -> shape, for every parameter of the model (lm_head.weight only when untied).
std::map<std::string, std::vector<int64_t>> parameter_shapes(const ModelConfig& cfg);

// Deterministic random weights (CPU): matrices ~ N(0, 0.02^2), norm weights = 1.
NamedTensors init_random_weights(const ModelConfig& cfg, uint64_t seed,
                                 torch::Dtype dtype = torch::kFloat32);

}  // namespace dice::model
