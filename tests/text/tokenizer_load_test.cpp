// Loading: model folders with and without a mask token, disagreeing files, malformed input,
// and the tokenizer/model compatibility check.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dice/text/tokenizer.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

using dice::text::Tokenizer;

namespace {

const std::string kQwen3Dir = std::string(DICE_DATA_DIR) + "/qwen3";

// A model folder holding Qwen3's tokenizer.json plus the given extra files.
std::string model_dir(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string dir = dice::fs::make_temp_dir("dice-text-model");
  EXPECT_EQ(symlink((kQwen3Dir + "/tokenizer.json").c_str(), (dir + "/tokenizer.json").c_str()), 0);
  for (auto& [name, text] : files) dice::fs::write_file(dir + "/" + name, text);
  return dir;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dice::Error& e) {
    return e.what();
  }
  return "";
}

// A tiny byte-level tokenizer.json: 256 byte tokens plus "ab" from one merge.
nlohmann::json tiny_json() {
  using nlohmann::json;
  uint32_t next = 256;
  json vocab = json::object();
  std::vector<std::string> byte_tok(256);
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    std::string s;
    if (cp < 0x80) s.push_back(static_cast<char>(cp));
    else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  static const json pre = json::parse(dice::fs::read_file(kQwen3Dir + "/tokenizer.json"))["pre_tokenizer"];
  return json{{"version", "1.0"},
              {"added_tokens", json::array({json{{"id", 257}, {"content", "<|endoftext|>"}, {"special", true}}})},
              {"normalizer", json{{"type", "NFC"}}},
              {"pre_tokenizer", pre},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}}};
}

}  // namespace

TEST(TokenizerLoad, QwenFolderHasNoMask) {
  Tokenizer t = Tokenizer::from_dir(kQwen3Dir);
  EXPECT_FALSE(t.has_mask_token());
  std::string err = error_of([&] { t.mask_token_id(); });
  EXPECT_NE(err.find("mask token"), std::string::npos) << err;
}

TEST(TokenizerLoad, MaskFromAddedTokensJson) {
  Tokenizer t = Tokenizer::from_dir(model_dir({{"added_tokens.json", R"({"<MASK>": 151669, "<|im_end|>": 151645})"}}));
  EXPECT_EQ(t.mask_token_id(), 151669);
  EXPECT_EQ(t.vocab_size(), 151670);
  EXPECT_EQ(t.encode("a<MASK><MASK>b"), (std::vector<int32_t>{64, 151669, 151669, 65}));
  EXPECT_EQ(t.decode({64, 151669, 65}, /*skip_special=*/true), "ab");
}

TEST(TokenizerLoad, MaskFromTokenizerConfig) {
  Tokenizer t = Tokenizer::from_dir(model_dir(
      {{"tokenizer_config.json",
        R"({"added_tokens_decoder": {"151645": {"content": "<|im_end|>", "special": true},
                                      "151669": {"content": "<|MASK|>", "special": true}}})"}}));
  EXPECT_EQ(t.mask_token_id(), 151669);
  EXPECT_EQ(t.encode("<|MASK|>"), std::vector<int32_t>{151669});
  EXPECT_TRUE(t.is_special(151669));
}

TEST(TokenizerLoad, DisagreeingFilesAreRefused) {
  std::string err = error_of([] { Tokenizer::from_dir(model_dir({{"added_tokens.json", R"({"<|im_end|>": 7})"}})); });
  EXPECT_NE(err.find("disagree"), std::string::npos) << err;
  err = error_of([] { Tokenizer::from_dir(model_dir({{"added_tokens.json", R"({"<new>": 151645})"}})); });
  EXPECT_NE(err.find("151645"), std::string::npos) << err;
}

TEST(TokenizerLoad, MissingAndMalformedFiles) {
  std::string err = error_of([] { Tokenizer::from_dir("/nonexistent/model"); });
  EXPECT_NE(err.find("no tokenizer.json"), std::string::npos) << err;
  err = error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); });
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  err = error_of([] { Tokenizer::from_json_text("{\"model\": [1, 2", "broken.json"); });
  EXPECT_NE(err.find("Could not parse broken.json"), std::string::npos) << err;
  err = error_of([] { Tokenizer::from_json_text("{\"a\": 1}", "x.json"); });
  EXPECT_NE(err.find("not a Hugging Face tokenizer.json"), std::string::npos) << err;
  err = error_of([] { Tokenizer::from_dir(model_dir({{"added_tokens.json", "[1,"}})); });
  EXPECT_NE(err.find("added_tokens.json"), std::string::npos) << err;

  auto j = tiny_json();
  j["model"]["type"] = "WordPiece";
  err = error_of([&] { Tokenizer::from_json_text(j.dump(), "wp.json"); });
  EXPECT_NE(err.find("WordPiece"), std::string::npos) << err;
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  err = error_of([&] { Tokenizer::from_json_text(j.dump(), "ws.json"); });
  EXPECT_NE(err.find("pre_tokenizer"), std::string::npos) << err;
  j = tiny_json();
  j["model"]["merges"] = {"a zz"};
  err = error_of([&] { Tokenizer::from_json_text(j.dump(), "m.json"); });
  EXPECT_NE(err.find("missing from the vocabulary"), std::string::npos) << err;
  j = tiny_json();
  j["model"]["vocab"].erase("a");
  err = error_of([&] { Tokenizer::from_json_text(j.dump(), "b.json"); });
  EXPECT_NE(err.find("byte 97"), std::string::npos) << err;
}

TEST(TokenizerLoad, TinyTokenizerBothMergeFormats) {
  auto j = tiny_json();
  Tokenizer a = Tokenizer::from_json_text(j.dump(), "tiny");
  EXPECT_EQ(a.encode("abab a<|endoftext|>"), (std::vector<int32_t>{256, 256, 32, 97, 257}));
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"})});
  Tokenizer b = Tokenizer::from_json_text(j.dump(), "tiny-pairs");
  EXPECT_EQ(b.encode("abab"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(b.vocab_size(), 258);
}

TEST(TokenizerLoad, AddedTokenStripFlags) {
  auto j = tiny_json();
  j["added_tokens"].push_back({{"id", 258}, {"content", "<x>"}, {"lstrip", true}, {"rstrip", true}});
  j["added_tokens"].push_back({{"id", 259}, {"content", "<y>"}});
  Tokenizer t = Tokenizer::from_json_text(j.dump(), "strip");
  EXPECT_EQ(t.encode("ab \t<x> \nab"), (std::vector<int32_t>{256, 258, 256}));
  EXPECT_EQ(t.encode("<x>"), (std::vector<int32_t>{258}));
  EXPECT_EQ(t.encode("a <y>b"), (std::vector<int32_t>{97, 32, 259, 98}));
  EXPECT_FALSE(t.is_special(259));
  j["added_tokens"].push_back({{"id", 260}, {"content", "<z>"}, {"single_word", true}});
  std::string err = error_of([&] { Tokenizer::from_json_text(j.dump(), "sw"); });
  EXPECT_NE(err.find("single_word"), std::string::npos) << err;
}

TEST(TokenizerLoad, CheckCompatible) {
  Tokenizer t = Tokenizer::from_dir(model_dir({{"added_tokens.json", R"({"<|MASK|>": 151669})"}}));
  EXPECT_NO_THROW(dice::text::check_compatible(t, 151936, 151669));
  std::string err = error_of([&] { dice::text::check_compatible(t, 151000, 151669); });
  EXPECT_NE(err.find("151000"), std::string::npos) << err;
  err = error_of([&] { dice::text::check_compatible(t, 151936, 151670); });
  EXPECT_NE(err.find("does not match the model"), std::string::npos) << err;
  Tokenizer q = Tokenizer::from_dir(kQwen3Dir);
  err = error_of([&] { dice::text::check_compatible(q, 151936, 151669); });
  EXPECT_NE(err.find("defines no mask token"), std::string::npos) << err;
  EXPECT_NO_THROW(dice::text::check_compatible(q, 151936, -1));
}
