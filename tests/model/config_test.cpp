// ModelConfig: config.json round trip, SDAR/Qwen3 fields, presets, errors.
#include "dice/model/config.h"

#include <gtest/gtest.h>

#include <string>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::model {
namespace {

// The shape of SDAR-4B-Chat's config.json (model_type "sdar", extra keys dice ignores).
const char* kSdarConfig = R"({
  "architectures": ["SDARForCausalLM"], "model_type": "sdar",
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 2560, "initializer_range": 0.02,
  "intermediate_size": 9728, "max_position_embeddings": 32768, "num_attention_heads": 32,
  "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151936,
  "block_size": 4, "mask_token_id": 151669, "use_cache": true
})";

std::string error_of(const std::string& json) {
  try {
    ModelConfig::from_json(json, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReadsSdarConfig) {
  auto c = ModelConfig::from_json(kSdarConfig);
  EXPECT_EQ(c.model_type, "sdar");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 9728);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 151669);
  auto preset = ModelConfig::preset("sdar-4b");
  preset.model_type = "sdar";
  EXPECT_TRUE(c == preset);
}

TEST(ModelConfig, RoundTripWritesQwen3) {
  for (const auto& name : ModelConfig::preset_names()) {
    auto c = ModelConfig::preset(name);
    const std::string text = c.to_json();
    EXPECT_NE(text.find("\"model_type\": \"qwen3\""), std::string::npos);
    EXPECT_NE(text.find("Qwen3ForCausalLM"), std::string::npos);
    auto back = ModelConfig::from_json(text);
    EXPECT_TRUE(back == c) << name;
  }
}

TEST(ModelConfig, DefaultsAndEosList) {
  auto c = ModelConfig::from_json(R"({"model_type":"qwen3","vocab_size":100,"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"eos_token_id":[7,8]})");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 151669);
  EXPECT_EQ(c.eos_token_id, 7);
  auto v5 = ModelConfig::from_json(R"({"model_type":"qwen3","vocab_size":100,"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
      "rope_parameters":{"rope_type":"default","rope_theta":5000.0}})");
  EXPECT_DOUBLE_EQ(v5.rope_theta, 5000.0);
  EXPECT_NE(error_of(R"({"vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
      "num_attention_heads":4,"rope_parameters":{"rope_type":"yarn","factor":4}})").find("yarn"), std::string::npos);
}

TEST(ModelConfig, Presets) {
  auto a = ModelConfig::preset("sdar-1.7b");
  EXPECT_EQ(a.hidden_size, 2048);
  EXPECT_EQ(a.num_hidden_layers, 28);
  EXPECT_EQ(a.num_attention_heads, 16);
  EXPECT_EQ(a.num_key_value_heads, 8);
  EXPECT_EQ(a.intermediate_size, 6144);
  // ~2.03B parameters (4.06 GB in bf16), untied.
  EXPECT_NEAR(static_cast<double>(a.num_parameters()), 2.03e9, 0.01e9);
  auto b = ModelConfig::preset("sdar-8b");
  EXPECT_NEAR(static_cast<double>(b.num_parameters()), 8.19e9, 0.01e9);
  auto c = ModelConfig::preset("sdar-4b");
  EXPECT_NEAR(static_cast<double>(c.num_parameters()), 4.41e9, 0.01e9);
  try {
    ModelConfig::preset("gpt2");
    FAIL() << "unknown preset accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sdar-1.7b"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, ClearErrors) {
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3"})").find("vocab_size"), std::string::npos);
  auto e = error_of(R"({"vocab_size":"big","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
                         "num_attention_heads":4})");
  EXPECT_NE(e.find("vocab_size"), std::string::npos) << e;
  EXPECT_NE(e.find("integer"), std::string::npos) << e;
  e = error_of(R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":128,
                   "num_hidden_layers":2,"num_attention_heads":4})");
  EXPECT_NE(e.find("llama"), std::string::npos) << e;
  e = error_of(R"({"vocab_size":10,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
                   "num_attention_heads":4,"num_key_value_heads":3})");
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  e = error_of(R"({"vocab_size":10,"hidden_size":64,"intermediate_size":0,"num_hidden_layers":2,
                   "num_attention_heads":4})");
  EXPECT_NE(e.find("intermediate_size"), std::string::npos) << e;
  EXPECT_NE(e.find("test.json"), std::string::npos) << e;
  EXPECT_THROW(ModelConfig::from_hf_dir("/nonexistent/dir"), Error);
}

TEST(ModelConfig, FileAndDir) {
  auto dir = fs::make_temp_dir("dice-model-config");
  fs::write_file(dir + "/config.json", ModelConfig::preset("tiny").to_json());
  EXPECT_TRUE(ModelConfig::from_hf_dir(dir) == ModelConfig::preset("tiny"));
  EXPECT_TRUE(ModelConfig::from_json_file(dir + "/config.json") == ModelConfig::preset("tiny"));
}

TEST(ModelConfig, RandomWeights) {
  auto c = ModelConfig::preset("tiny");
  auto w = init_random_weights(c, 7, torch::kFloat32);
  auto shapes = parameter_shapes(c);
  ASSERT_EQ(w.size(), shapes.size());
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(w.count(name)) << name;
    EXPECT_EQ(w[name].sizes().vec(), shape) << name;
  }
  EXPECT_TRUE(w["model.norm.weight"].eq(1).all().item<bool>());
  EXPECT_NEAR(w["model.layers.0.mlp.up_proj.weight"].std().item<double>(), 0.02, 0.002);
  auto again = init_random_weights(c, 7, torch::kFloat32);
  EXPECT_TRUE(torch::equal(w["lm_head.weight"], again["lm_head.weight"]));
  auto other = init_random_weights(c, 8, torch::kFloat32);
  EXPECT_FALSE(torch::equal(w["lm_head.weight"], other["lm_head.weight"]));
  auto tied = c;
  tied.tie_word_embeddings = true;
  EXPECT_EQ(init_random_weights(tied, 1, torch::kBFloat16).count("lm_head.weight"), 0u);
}

}  // namespace
}  // namespace dice::model
