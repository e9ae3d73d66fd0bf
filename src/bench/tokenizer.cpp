// `dice bench tokenizer`: encode / decode throughput of dice::text::Tokenizer, and of the
// independent JavaScript implementation (@lenml/tokenizers under node) on the same text.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "dice/bench/bench.h"
#include "dice/text/tokenizer.h"
#include "dice/text/unicode.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/timer.h"

namespace dice::bench {
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

// CPU time of this thread: on a shared machine wall time also counts other processes' turns.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Rate {
  double wall_s = 0, cpu_s = 0;
};

template <class F>
Rate timed(int reps, F&& f) {
  double c0 = thread_cpu_s();
  Timer t;
  for (int r = 0; r < reps; ++r) f();
  return {t.elapsed_s() / reps, (thread_cpu_s() - c0) / reps};
}

void print_rate(const char* what, size_t bytes, size_t tokens, Rate r) {
  std::printf("%-21s %8.2f MB/s %11.0f tokens/s  (CPU time: %8.2f MB/s)\n", what, mb(bytes) / r.wall_s,
              static_cast<double>(tokens) / r.wall_s, mb(bytes) / r.cpu_s);
}

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
    return timed(a.reps, [&] { ids = tok.encode(text); });
  };
  Rate enc_nocache = encode_rate(false);
  Rate enc = encode_rate(true);
  std::string back;
  Rate dec = timed(a.reps, [&] { back = tok.decode(ids); });
  DICE_REQUIRE(back == text::unicode::nfc(text), "Round trip failed on the benchmark text (a tokenizer bug).");

  std::printf("tokens     %zu\n", ids.size());
  print_rate("dice encode", text.size(), ids.size(), enc);
  print_rate("dice encode no cache", text.size(), ids.size(), enc_nocache);
  print_rate("dice decode", back.size(), ids.size(), dec);

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
  Rate node{j["encode_s"].get<double>(), j["cpu_s"].get<double>()};
  auto node_tokens = j["tokens"].get<size_t>();
  print_rate("node encode", text.size(), node_tokens, node);
  std::printf("node       @lenml/tokenizers with %s/qwen3; %s\n", a.data_dir.c_str(),
              node_tokens == ids.size() ? "same token count" : "TOKEN COUNTS DIFFER");
  std::printf("ratio dice/node      %8.1fx encode throughput (CPU time: %.1fx)\n", node.wall_s / enc.wall_s,
              node.cpu_s / enc.cpu_s);
}

void setup_tokenizer(CLI::App& cmd) {
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

BenchSuite tokenizer_suite() {
  return {"tokenizer",
          "tokenizer encode/decode MB/s, vs @lenml/tokenizers under node",
          setup_tokenizer};
}

}  // namespace dice::bench
