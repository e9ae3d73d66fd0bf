// `dice tokenize`: encode text to token ids or decode ids to text with a model's tokenizer
// (for inspecting prompts and rollouts).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "dice/text/chat.h"
#include "dice/text/tokenizer.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/home.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct TokenizeArgs {
  std::string tokenizer_dir = util::home_dir() + "/data/qwen3";
  std::string text;
  std::string file;
  bool decode = false;
  bool chat = false;
  bool no_special = false;
  bool show_tokens = false;
};

void run(const TokenizeArgs& a) {
  text::Tokenizer tok = text::Tokenizer::from_dir(a.tokenizer_dir);
  std::string input = !a.file.empty() ? fs::read_file(a.file)
                      : !a.text.empty() ? a.text
                                        : std::string(std::istreambuf_iterator<char>(std::cin), {});
  if (a.decode) {
    std::vector<int32_t> ids;
    std::istringstream in(input);
    for (std::string w; in >> w;) {
      while (!w.empty() && (w.back() == ',' || w.back() == ']')) w.pop_back();
      while (!w.empty() && w.front() == '[') w.erase(0, 1);
      if (w.empty()) continue;
      try {
        ids.push_back(std::stoi(w));
      } catch (const std::exception&) {
        DICE_REQUIRE(false, "'", w, "' is not a token id; --decode reads integers separated by spaces or commas.");
      }
    }
    std::string out = tok.decode(ids, a.no_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::printf("\n");
    return;
  }
  if (a.chat) input = text::chat_prompt(input);
  std::vector<int32_t> ids = tok.encode(input, !a.no_special);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (a.show_tokens)
      std::printf("%d\t%s\n", ids[i], tok.id_to_token(ids[i]).c_str());
    else
      std::printf(i + 1 < ids.size() ? "%d " : "%d\n", ids[i]);
  }
  std::fprintf(stderr, "%zu tokens, %zu bytes\n", ids.size(), input.size());
}

void setup_tokenize(CLI::App& cmd) {
  auto a = std::make_shared<TokenizeArgs>();
  cmd.add_option("--tokenizer", a->tokenizer_dir, "Hugging Face model folder with tokenizer.json")->capture_default_str();
  cmd.add_option("text", a->text, "text to encode, or ids to decode (default: stdin)");
  cmd.add_option("--file", a->file, "read the input from a file")->check(CLI::ExistingFile);
  cmd.add_flag("--decode", a->decode, "decode token ids to text");
  cmd.add_flag("--chat", a->chat, "wrap the text in the chat template before encoding");
  cmd.add_flag("--no-special", a->no_special, "encode special tokens as text / drop them when decoding");
  cmd.add_flag("--show-tokens", a->show_tokens, "print one id and its vocabulary string per line");
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_SUBCOMMAND("tokenize", "encode text to token ids (or --decode ids) with a model's tokenizer", setup_tokenize);

}  // namespace dice::app
