// The Qwen2 pre-tokenizer scanner (see pretokenize.h for the pattern it implements).
#include "dice/text/pretokenize.h"

#include "dice/text/unicode.h"
#include "dice/util/error.h"

namespace dice::text {
namespace {

// Per character: class (bits 0-1) and whether it is \r or \n (bit 2).
constexpr uint8_t kCrLf = 4;

struct Chars {
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // byte offset of each character; off[n] = text size
};

void classify(std::string_view text, Chars& c) {
  c.cls.clear();
  c.off.clear();
  c.cls.reserve(text.size());
  c.off.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    auto b = static_cast<unsigned char>(text[i]);
    c.off.push_back(static_cast<uint32_t>(i));
    if (b < 0x80) {
      uint8_t k = unicode::char_class(b);
      if (b == '\r' || b == '\n') k |= kCrLf;
      c.cls.push_back(k);
      ++i;
      continue;
    }
    auto d = unicode::decode_utf8(text.data() + i, text.size() - i);
    c.cls.push_back(unicode::char_class(d.cp));
    i += d.len;
  }
  c.off.push_back(static_cast<uint32_t>(text.size()));
}

inline char lower(char ch) { return (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch + 32) : ch; }

// Length in characters of a contraction ('s 't 're 've 'm 'll 'd) at character i, or 0.
size_t contraction(std::string_view text, const Chars& c, size_t i, size_t n) {
  if (text[c.off[i]] != '\'' || i + 1 >= n) return 0;
  char a = lower(text[c.off[i + 1]]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  char b = lower(text[c.off[i + 2]]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

void pretokenize(std::string_view text, std::vector<Piece>& out) {
  DICE_REQUIRE(text.size() < (size_t{1} << 32), "Text of ", text.size(), " bytes is too long to tokenize (the limit is 4 GiB).");
  thread_local Chars c;
  classify(text, c);
  const size_t n = c.cls.size();
  auto cls = [&](size_t i) { return static_cast<uint8_t>(c.cls[i] & 3); };
  auto run = [&](size_t i, uint8_t k) {
    while (i < n && cls(i) == k) ++i;
    return i;
  };
  size_t i = 0;
  while (i < n) {
    const uint8_t k = cls(i);
    size_t j;
    if (size_t m = contraction(text, c, i, n)) {
      j = i + m;
    } else if (k == unicode::kLetter) {
      j = run(i + 1, unicode::kLetter);
    } else if (k != unicode::kNumber && !(c.cls[i] & kCrLf) && i + 1 < n && cls(i + 1) == unicode::kLetter) {
      j = run(i + 1, unicode::kLetter);  // one non-letter, non-number, non-newline prefix
    } else if (k == unicode::kNumber) {
      j = i + 1;
    } else if (k == unicode::kOther || (text[c.off[i]] == ' ' && i + 1 < n && cls(i + 1) == unicode::kOther)) {
      j = run(k == unicode::kOther ? i : i + 1, unicode::kOther);
      while (j < n && (c.cls[j] & kCrLf)) ++j;
    } else {  // whitespace run [i, w)
      size_t w = run(i, unicode::kSpace);
      size_t last_nl = n;
      for (size_t q = w; q > i; --q)
        if (c.cls[q - 1] & kCrLf) {
          last_nl = q - 1;
          break;
        }
      if (last_nl != n) j = last_nl + 1;     // \s*[\r\n]+
      else if (w == n || w - i == 1) j = w;  // \s+(?!\S) at the end, or a lone \s+
      else j = w - 1;                        // \s+(?!\S): leave the last space to the next piece
    }
    out.push_back({c.off[i], c.off[j] - c.off[i]});
    i = j;
  }
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<Piece> pieces;
  pretokenize(text, pieces);
  std::vector<std::string_view> res;
  res.reserve(pieces.size());
  for (auto p : pieces) res.push_back(text.substr(p.offset, p.length));
  return res;
}

}  // namespace dice::text
