// `dice bench tokenizer`: encode / decode throughput of dice::text::Tokenizer, and of the
// independent JavaScript implementation (@lenml/tokenizers under node) on the same text.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "bench.h"
#include "dice/text/tokenizer.h"
#include "dice/text/unicode.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/timer.h"

namespace dice::app {
namespace {

struct TokenizerBenchArgs {
  std::string file;
  std::string tokenizer_dir = std::string(DICE_SOURCE_DIR) + "/data/qwen3";
  std::string data_dir = std::string(DICE_SOURCE_DIR) + "/data";
  double target_mb = 4.0;
  int reps = 3;
  bool node = true;
};

// The tokenizer test corpus (valid UTF-8 files), concatenated.
std::string default_corpus() {
  const std::string dir = std::string(DICE_SOURCE_DIR) + "/tests/text/corpus/";
  std::string text;
  for (const char* f : {"python.py", "cuda.cu", "whitespace.txt", "numbers.txt", "nfc.txt", "multilingual.txt",
                        "special.txt", "prose.txt"})
    text += fs::read_file(dir + f);
  return text;
}

double mb(size_t bytes) { return static_cast<double>(bytes) / 1e6; }

void run_bench(const TokenizerBenchArgs& a) {
  std::string unit = a.file.empty() ? default_corpus() : fs::read_file(a.file);
  DICE_REQUIRE(!unit.empty(), "The benchmark text is empty.");
  std::string text;
  while (mb(text.size()) < a.target_mb) text += unit;

  Timer load_timer;
  text::Tokenizer tok = text::Tokenizer::from_dir(a.tokenizer_dir);
  double load_s = load_timer.elapsed_s();
  std::printf("tokenizer  %s (vocab %d), loaded in %.2f s\n", a.tokenizer_dir.c_str(), tok.vocab_size(), load_s);
  std::printf("text       %.2f MB (%s repeated)\n", mb(text.size()), a.file.empty() ? "test corpus" : a.file.c_str());

  std::vector<int32_t> ids;
  auto encode_rate = [&](bool cache) {
    tok.set_word_cache(cache);
    ids = tok.encode(text);  // warm-up (fills the word cache when on)
    Timer t;
    for (int r = 0; r < a.reps; ++r) ids = tok.encode(text);
    return t.elapsed_s() / a.reps;
  };
  double enc_nocache_s = encode_rate(false);
  double enc_s = encode_rate(true);
  Timer dt;
  std::string back;
  for (int r = 0; r < a.reps; ++r) back = tok.decode(ids);
  double dec_s = dt.elapsed_s() / a.reps;
  DICE_REQUIRE(back == text::unicode::nfc(text), "Round trip failed on the benchmark text (a tokenizer bug).");

  std::printf("dice encode          %8.2f MB/s  %10.0f tokens/s  (%zu tokens)\n", mb(text.size()) / enc_s,
              static_cast<double>(ids.size()) / enc_s, ids.size());
  std::printf("dice encode no cache %8.2f MB/s  %10.0f tokens/s\n", mb(text.size()) / enc_nocache_s,
              static_cast<double>(ids.size()) / enc_nocache_s);
  std::printf("dice decode          %8.2f MB/s  %10.0f tokens/s\n", mb(back.size()) / dec_s,
              static_cast<double>(ids.size()) / dec_s);

  if (!a.node) return;
  if (std::system("command -v node > /dev/null 2>&1") != 0) {
    std::printf("node       not found: no reference measurement\n");
    return;
  }
  std::string tmp = fs::make_temp_dir("dice-bench-tok");
  fs::write_file(tmp + "/text.txt", text);
  std::string cmd = "node '" + std::string(DICE_SOURCE_DIR) + "/tests/text/js_encode.js' '" + a.data_dir +
                    "' bench '" + tmp + "/text.txt' 1 > '" + tmp + "/out.json' 2> '" + tmp + "/err.txt'";
  if (std::system(cmd.c_str()) != 0) {
    std::printf("node       failed: %s\n", fs::read_file(tmp + "/err.txt").c_str());
    return;
  }
  auto j = nlohmann::json::parse(fs::read_file(tmp + "/out.json"));
  double node_s = j["encode_s"].get<double>();
  auto node_tokens = j["tokens"].get<size_t>();
  std::printf("node encode          %8.2f MB/s  %10.0f tokens/s  (%zu tokens, @lenml/tokenizers, %s/qwen3)\n",
              mb(text.size()) / node_s, static_cast<double>(node_tokens) / node_s, node_tokens, a.data_dir.c_str());
  std::printf("ratio dice/node      %8.1fx encode throughput%s\n", node_s / enc_s,
              node_tokens == ids.size() ? "" : "  (token counts differ!)");
}

void setup(CLI::App& cmd) {
  auto a = std::make_shared<TokenizerBenchArgs>();
  cmd.add_option("--file", a->file, "text to encode (default: the tokenizer test corpus)")->check(CLI::ExistingFile);
  cmd.add_option("--tokenizer", a->tokenizer_dir, "Hugging Face model folder with tokenizer.json")->capture_default_str();
  cmd.add_option("--data-dir", a->data_dir, "folder with npm/node_modules/@lenml/tokenizers and qwen3/ for node")
      ->capture_default_str();
  cmd.add_option("--mb", a->target_mb, "repeat the text up to this many MB")->capture_default_str();
  cmd.add_option("--reps", a->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_flag("!--no-node", a->node, "skip the node reference");
  cmd.callback([a] { run_bench(*a); });
}

}  // namespace

DICE_BENCH("tokenizer", "tokenizer encode/decode MB/s, vs @lenml/tokenizers under node", setup);

}  // namespace dice::app
