// ModelConfig <-> HF config.json (nlohmann-json), presets, parameter shapes, random weights.
#include "dice/model/config.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::model {
namespace {

using json = nlohmann::json;

int64_t get_int(const json& j, const char* key, const std::string& source, bool required, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    DICE_REQUIRE(!required, source, " has no \"", key, "\"; a Qwen3/SDAR config.json needs it.");
    return fallback;
  }
  DICE_REQUIRE(it->is_number_integer() || it->is_number_unsigned(), source, ": \"", key,
               "\" must be an integer, got ", it->dump(), ".");
  return it->get<int64_t>();
}

double get_double(const json& j, const char* key, const std::string& source, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DICE_REQUIRE(it->is_number(), source, ": \"", key, "\" must be a number, got ", it->dump(), ".");
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DICE_REQUIRE(it->is_boolean(), source, ": \"", key, "\" must be true or false, got ", it->dump(), ".");
  return it->get<bool>();
}

// eos_token_id may be one id or a list of ids (the first is kept).
int64_t get_id(const json& j, const char* key, const std::string& source, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_array()) {
    DICE_REQUIRE(!it->empty() && (*it)[0].is_number_integer(), source, ": \"", key,
                 "\" must be an integer or a non-empty list of integers, got ", it->dump(), ".");
    return (*it)[0].get<int64_t>();
  }
  DICE_REQUIRE(it->is_number_integer(), source, ": \"", key, "\" must be an integer, got ", it->dump(), ".");
  return it->get<int64_t>();
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(str(source, " is not valid JSON: ", e.what()));
  }
  DICE_REQUIRE(j.is_object(), source, " must hold a JSON object.");
  ModelConfig c;
  if (j.contains("model_type")) {
    DICE_REQUIRE(j["model_type"].is_string(), source, ": \"model_type\" must be a string.");
    c.model_type = j["model_type"].get<std::string>();
    DICE_REQUIRE(c.model_type == "qwen3" || c.model_type == "sdar", source, ": model_type \"", c.model_type,
                 "\" is not supported; dice reads Qwen3 (\"qwen3\") and SDAR (\"sdar\") models.");
  }
  c.vocab_size = get_int(j, "vocab_size", source, true, 0);
  c.hidden_size = get_int(j, "hidden_size", source, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", source, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", source, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", source, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", source, false, c.num_attention_heads);
  DICE_REQUIRE(c.num_attention_heads > 0, source, ": \"num_attention_heads\" must be positive, got ",
               c.num_attention_heads, ".");
  c.head_dim = get_int(j, "head_dim", source, false, c.hidden_size / c.num_attention_heads);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", source, c.rms_norm_eps);
  c.rope_theta = get_double(j, "rope_theta", source, c.rope_theta);
  // transformers 5 writes {"rope_parameters": {"rope_type": "default", "rope_theta": ...}}.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    DICE_REQUIRE(!rp.contains("rope_type") || rp["rope_type"].is_string(), source,
                 ": rope_parameters.rope_type must be a string.");
    const std::string type = rp.value("rope_type", std::string("default"));
    DICE_REQUIRE(type == "default", source, ": rope_parameters.rope_type \"", type,
                 "\" is not supported; dice implements plain RoPE only (SDAR uses none).");
    c.rope_theta = get_double(rp, "rope_theta", source + " rope_parameters", c.rope_theta);
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    throw Error(str(source, ": \"rope_scaling\" is set (", j["rope_scaling"].dump(),
                    "); dice implements plain RoPE only (SDAR uses none)."));
  }
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, false, c.max_position_embeddings);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, c.tie_word_embeddings);
  c.block_size = get_int(j, "block_size", source, false, c.block_size);
  c.mask_token_id = get_id(j, "mask_token_id", source, c.mask_token_id);
  c.bos_token_id = get_id(j, "bos_token_id", source, c.bos_token_id);
  c.eos_token_id = get_id(j, "eos_token_id", source, c.eos_token_id);
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (j.contains("dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(str(source, ": ", e.what()));
  }
  return c;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  return from_json(fs::read_file(path), path);
}

ModelConfig ModelConfig::from_hf_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  DICE_REQUIRE(fs::exists(path), "No config.json in ", dir, "; point at a Hugging Face model folder.");
  return from_json_file(path);
}

void ModelConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    DICE_REQUIRE(v > 0, "\"", name, "\" must be positive, got ", v, ".");
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  positive("block_size", block_size);
  DICE_REQUIRE(head_dim % 2 == 0, "\"head_dim\" must be even for RoPE, got ", head_dim, ".");
  DICE_REQUIRE(num_attention_heads % num_key_value_heads == 0, "\"num_attention_heads\" (", num_attention_heads,
               ") must be a multiple of \"num_key_value_heads\" (", num_key_value_heads, ").");
  DICE_REQUIRE(rms_norm_eps > 0, "\"rms_norm_eps\" must be positive, got ", rms_norm_eps, ".");
  DICE_REQUIRE(rope_theta > 0, "\"rope_theta\" must be positive, got ", rope_theta, ".");
  DICE_REQUIRE(torch_dtype == "bfloat16" || torch_dtype == "float16" || torch_dtype == "float32",
               "\"torch_dtype\" must be bfloat16, float16 or float32, got \"", torch_dtype, "\".");
}

std::string ModelConfig::to_json() const {
  json j = {
      {"architectures", {"Qwen3ForCausalLM"}},
      {"model_type", "qwen3"},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"rope_scaling", nullptr},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", rope_theta}}},
      {"max_position_embeddings", max_position_embeddings},
      {"max_window_layers", num_hidden_layers},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"tie_word_embeddings", tie_word_embeddings},
      {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_id},
      {"torch_dtype", torch_dtype},
      {"block_size", block_size},
      {"mask_token_id", mask_token_id},
  };
  return j.dump(2) + "\n";
}

std::vector<std::string> ModelConfig::preset_names() { return {"tiny", "sdar-1.7b", "sdar-4b", "sdar-8b"}; }

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  auto set = [&c](int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn) {
    c.hidden_size = hidden;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.head_dim = head_dim;
    c.intermediate_size = ffn;
  };
  c.vocab_size = 151936;
  if (name == "tiny") {
    // Small enough for CPU tests; still GQA (4 q heads per 2 kv heads), untied, and a vocab that
    // holds the mask token id of a tiny test tokenizer (ids are taken modulo in tests).
    set(64, 2, 4, 2, 16, 128);
    c.vocab_size = 512;
    c.mask_token_id = 511;
    c.bos_token_id = 0;
    c.eos_token_id = 1;
    c.max_position_embeddings = 4096;
  } else if (name == "sdar-1.7b") {
    set(2048, 28, 16, 8, 128, 6144);
  } else if (name == "sdar-4b") {
    set(2560, 36, 32, 8, 128, 9728);
  } else if (name == "sdar-8b") {
    set(4096, 36, 32, 8, 128, 12288);
  } else {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(str("Unknown model preset \"", name, "\"; the presets are ", names, "."));
  }
  c.validate();
  return c;
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return model_type == o.model_type && vocab_size == o.vocab_size && hidden_size == o.hidden_size &&
         intermediate_size == o.intermediate_size && num_hidden_layers == o.num_hidden_layers &&
         num_attention_heads == o.num_attention_heads && num_key_value_heads == o.num_key_value_heads &&
         head_dim == o.head_dim && rms_norm_eps == o.rms_norm_eps && rope_theta == o.rope_theta &&
         max_position_embeddings == o.max_position_embeddings && tie_word_embeddings == o.tie_word_embeddings &&
         block_size == o.block_size && mask_token_id == o.mask_token_id && bos_token_id == o.bos_token_id &&
         eos_token_id == o.eos_token_id && torch_dtype == o.torch_dtype;
}

std::map<std::string, std::vector<int64_t>> parameter_shapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> s;
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
  s["model.embed_tokens.weight"] = {c.vocab_size, H};
  s["model.norm.weight"] = {H};
  if (!c.tie_word_embeddings) s["lm_head.weight"] = {c.vocab_size, H};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s[p + "input_layernorm.weight"] = {H};
    s[p + "post_attention_layernorm.weight"] = {H};
    s[p + "self_attn.q_proj.weight"] = {q_out, H};
    s[p + "self_attn.k_proj.weight"] = {kv_out, H};
    s[p + "self_attn.v_proj.weight"] = {kv_out, H};
    s[p + "self_attn.o_proj.weight"] = {H, q_out};
    s[p + "self_attn.q_norm.weight"] = {D};
    s[p + "self_attn.k_norm.weight"] = {D};
    s[p + "mlp.gate_proj.weight"] = {F, H};
    s[p + "mlp.up_proj.weight"] = {F, H};
    s[p + "mlp.down_proj.weight"] = {H, F};
  }
  return s;
}

int64_t ModelConfig::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes(*this)) {
    int64_t e = 1;
    for (auto d : shape) e *= d;
    n += e;
  }
  return n;
}

NamedTensors init_random_weights(const ModelConfig& cfg, uint64_t seed, torch::Dtype dtype) {
  cfg.validate();
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  NamedTensors out;
  for (const auto& [name, shape] : parameter_shapes(cfg)) {
    torch::Tensor t;
    if (shape.size() == 1) {
      t = torch::ones(shape, torch::kFloat32);
    } else {
      t = at::normal(0.0, 0.02, shape, gen, torch::TensorOptions().dtype(torch::kFloat32));
    }
    out[name] = t.to(dtype);
  }
  return out;
}

}  // namespace dice::model
