#pragma once
// Unicode helpers for the tokenizer: UTF-8 decoding that keeps invalid bytes, the character
// classes the Qwen2 pre-tokenizer needs (\p{L}, \p{N}, \s), and NFC normalization.
//
// Invalid UTF-8 (stray continuation bytes, truncated or overlong sequences, surrogates, code
// points above U+10FFFF) is never an error here: each offending byte becomes one pseudo code
// point kInvalidBase + byte, which is classified as "other" (not a letter, number or space),
// is a starter that never composes, and is written back as the original byte.
// Tables come from src/text/unicode_tables.inc (tools/gen_unicode_tables.py, Python unicodedata).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dice::text::unicode {

constexpr uint32_t kInvalidBase = 0x110000;  // pseudo code points 0x110000 + byte

struct Decoded {
  uint32_t cp;   // code point, or kInvalidBase + byte
  uint32_t len;  // bytes consumed (1..4)
};

// Decodes the code point starting at s[0]; n >= 1 bytes are available.
inline Decoded decode_utf8(const char* s, size_t n);

// Appends cp as UTF-8 (a pseudo code point as its original byte).
void append_utf8(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// General category L* -> kLetter, N* -> kNumber, White_Space -> kSpace, else kOther.
CharClass char_class(uint32_t cp);

// The Unicode version the tables were generated from.
const char* unicode_version();

// Canonical combining class (0 for starters and pseudo code points).
int combining_class(uint32_t cp);

// True when cp may change under NFC or combine with a neighbour; text with none is NFC.
bool nfc_unsafe(uint32_t cp);

// NFC normal form of s (invalid bytes are kept as they are).
std::string nfc(std::string_view s);

// ---- inline definitions ----

inline Decoded decode_utf8(const char* s, size_t n) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](size_t i) { return i < n && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  auto bad = Decoded{kInvalidBase + b0, 1};
  if (b0 < 0xC2) return bad;  // continuation byte or overlong 2-byte lead
  if (b0 < 0xE0) {
    if (!cont(1)) return bad;
    return {((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[1]) & 0x3Fu), 2};
  }
  if (b0 < 0xF0) {
    if (!cont(1) || !cont(2)) return bad;
    uint32_t cp = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[1]) & 0x3Fu) << 6) |
                  (static_cast<unsigned char>(s[2]) & 0x3Fu);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return bad;
    return {cp, 3};
  }
  if (b0 < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return bad;
    uint32_t cp = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[1]) & 0x3Fu) << 12) |
                  ((static_cast<unsigned char>(s[2]) & 0x3Fu) << 6) | (static_cast<unsigned char>(s[3]) & 0x3Fu);
    if (cp < 0x10000 || cp > 0x10FFFF) return bad;
    return {cp, 4};
  }
  return bad;
}

}  // namespace dice::text::unicode
