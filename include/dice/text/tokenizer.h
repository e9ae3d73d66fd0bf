#pragma once
// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (Qwen2 / Qwen3 / SDAR).
//
// Pipeline of encode(): added tokens are cut out of the raw text first (leftmost, longest
// match); every stretch between them is NFC-normalized, split by the Qwen2 pre-tokenizer
// pattern (a hand-written scanner, see pretokenize.h), and each piece's bytes are merged by
// BPE rank. decode() concatenates the tokens' bytes; the result is UTF-8 exactly when the
// ids came from encode() of UTF-8 text, and any bytes otherwise (nothing is replaced).
//
// Supported tokenizer.json: model BPE (merges as "a b" strings or [a, b] pairs, no dropout,
// no unk), normalizer NFC or none, pre-tokenizer Sequence[Split(Qwen2 regex), ByteLevel] or a
// lone ByteLevel with the same regex semantics, decoder ByteLevel. Anything else is refused
// with an error naming the field. Encoding and decoding are const and thread safe.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dice::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // removed by decode(skip_special = true), kept as text when !allow_special
  bool lstrip = false;   // swallows whitespace on its left
  bool rstrip = false;   // swallows whitespace on its right
};

class Tokenizer {
 public:
  // A Hugging Face model folder: tokenizer.json plus, when present, the added tokens listed in
  // tokenizer_config.json (added_tokens_decoder) and added_tokens.json (e.g. SDAR's mask token).
  static Tokenizer from_dir(const std::string& hf_model_dir);
  // A tokenizer.json file alone.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // tokenizer.json text (`origin` names it in errors).
  static Tokenizer from_json_text(std::string_view json_text, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // allow_special = false: special tokens written in the text are encoded as ordinary text
  // (non-special added tokens such as <think> are still matched, as Hugging Face does).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // Bytes of one token (vocab bytes, or an added token's content). Throws on an unknown id.
  std::string token_bytes(int32_t id) const;

  // Vocabulary form (byte-level characters, e.g. "Ġhello") or an added token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // throws dice::Error for an unknown id

  int32_t vocab_size() const;  // largest id + 1 (vocab and added tokens)
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  int32_t endoftext_id() const;  // <|endoftext|>
  int32_t im_start_id() const;   // <|im_start|>
  int32_t im_end_id() const;     // <|im_end|>
  bool has_mask_token() const;
  // <|MASK|> (or <MASK>, SDAR's spelling); dice::Error when the tokenizer has none.
  int32_t mask_token_id() const;

  std::string origin() const;  // the file(s) it was loaded from

  // Each thread keeps a cache of BPE results for short pieces (on by default). Off: every piece
  // is merged afresh (for benchmarks and tests of the merge loop itself).
  void set_word_cache(bool on);

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Errors with a sentence when a tokenizer cannot drive a model: ids at or beyond the model's
// vocabulary (embedding rows), or a mask token that differs from the model's (mask_id < 0:
// the model needs no mask token).
void check_compatible(const Tokenizer& tok, int64_t model_vocab_size, int64_t mask_id);

}  // namespace dice::text
