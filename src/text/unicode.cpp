// Unicode classes and NFC from the generated tables (unicode_tables.inc).
#include "dice/text/unicode.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dice::text::unicode {
namespace {

#include "unicode_tables.inc"

template <size_t N>
bool in_ranges(const uint32_t (&r)[N][2], uint32_t cp) {
  auto it = std::upper_bound(std::begin(r), std::end(r), cp,
                             [](uint32_t v, const uint32_t(&e)[2]) { return v < e[0]; });
  return it != std::begin(r) && cp <= (*(it - 1))[1];
}

// One byte per BMP code point: bits 0-1 CharClass, bit 2 NFC-unsafe. Built once.
struct BmpTable {
  uint8_t v[0x10000];
  BmpTable() {
    for (uint32_t cp = 0; cp < 0x10000; ++cp) v[cp] = 0;
    auto mark = [&](auto& ranges, uint8_t bits, bool or_bits) {
      for (auto& r : ranges)
        for (uint32_t cp = r[0]; cp <= r[1] && cp < 0x10000; ++cp)
          v[cp] = or_bits ? static_cast<uint8_t>(v[cp] | bits) : static_cast<uint8_t>((v[cp] & ~3u) | bits);
    };
    mark(kLetterRanges, kLetter, false);
    mark(kNumberRanges, kNumber, false);
    mark(kWhiteSpaceRanges, kSpace, false);
    mark(kNfcUnsafeRanges, 4, true);
  }
};

const BmpTable& bmp() {
  static const BmpTable t;
  return t;
}

// Hangul syllable constants (Unicode ch. 3.12).
constexpr uint32_t SBase = 0xAC00, LBase = 0x1100, VBase = 0x1161, TBase = 0x11A7;
constexpr uint32_t LCount = 19, VCount = 21, TCount = 28, NCount = VCount * TCount, SCount = LCount * NCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= SBase && cp < SBase + SCount) {
    uint32_t s = cp - SBase;
    out.push_back(LBase + s / NCount);
    out.push_back(VBase + (s % NCount) / TCount);
    if (s % TCount) out.push_back(TBase + s % TCount);
    return;
  }
  if (cp < kInvalidBase && nfc_unsafe(cp)) {
    auto it = std::lower_bound(std::begin(kDecompIndex), std::end(kDecompIndex), cp,
                               [](const uint32_t(&e)[3], uint32_t v) { return e[0] < v; });
    if (it != std::end(kDecompIndex) && (*it)[0] == cp) {
      out.insert(out.end(), kDecompData + (*it)[1], kDecompData + (*it)[1] + (*it)[2]);
      return;
    }
  }
  out.push_back(cp);
}

uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= LBase && a < LBase + LCount && b >= VBase && b < VBase + VCount)
    return SBase + ((a - LBase) * VCount + (b - VBase)) * TCount;
  if (a >= SBase && a < SBase + SCount && (a - SBase) % TCount == 0 && b > TBase && b < TBase + TCount)
    return a + (b - TBase);
  auto key = [](const uint32_t(&e)[3]) { return (uint64_t{e[0]} << 32) | e[1]; };
  uint64_t k = (uint64_t{a} << 32) | b;
  auto it = std::lower_bound(std::begin(kComposePairs), std::end(kComposePairs), k,
                             [&](const uint32_t(&e)[3], uint64_t v) { return key(e) < v; });
  return (it != std::end(kComposePairs) && key(*it) == k) ? (*it)[2] : 0;
}

}  // namespace

const char* unicode_version() { return DICE_UNICODE_VERSION; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < kInvalidBase) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(cp - kInvalidBase));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto d = decode_utf8(s.data() + i, s.size() - i);
    if (d.cp >= kInvalidBase) return false;
    i += d.len;
  }
  return true;
}

CharClass char_class(uint32_t cp) {
  if (cp < 0x10000) return static_cast<CharClass>(bmp().v[cp] & 3);
  if (cp >= kInvalidBase) return kOther;
  if (in_ranges(kLetterRanges, cp)) return kLetter;
  if (in_ranges(kNumberRanges, cp)) return kNumber;
  return kOther;  // no White_Space above the BMP
}

bool nfc_unsafe(uint32_t cp) {
  if (cp < 0x10000) return bmp().v[cp] & 4;
  return cp < kInvalidBase && in_ranges(kNfcUnsafeRanges, cp);
}

int combining_class(uint32_t cp) {
  if (cp >= kInvalidBase || !nfc_unsafe(cp)) return 0;
  auto it = std::upper_bound(std::begin(kCombiningClassRanges), std::end(kCombiningClassRanges), cp,
                             [](uint32_t v, const uint32_t(&e)[3]) { return v < e[0]; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return cp <= (*it)[1] ? static_cast<int>((*it)[2]) : 0;
}

std::string nfc(std::string_view s) {
  // Fast path: find the first unsafe code point; text before the last safe code point that
  // precedes it cannot interact with what follows, so it is copied as is.
  size_t safe_start = 0;  // byte offset of the last safe code point seen
  size_t i = 0;
  for (; i < s.size();) {
    // Skip ASCII (always safe) eight bytes at a time.
    uint64_t w;
    if (i + 8 <= s.size() && (std::memcpy(&w, s.data() + i, 8), (w & 0x8080808080808080ull) == 0)) {
      i += 8;
      safe_start = i - 1;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      safe_start = i++;
      continue;
    }
    auto d = decode_utf8(s.data() + i, s.size() - i);
    if (nfc_unsafe(d.cp)) break;
    safe_start = i;
    i += d.len;
  }
  if (i >= s.size()) return std::string(s);

  std::vector<uint32_t> buf;
  buf.reserve(s.size() - safe_start);
  for (size_t j = safe_start; j < s.size();) {
    auto d = decode_utf8(s.data() + j, s.size() - j);
    decompose(d.cp, buf);
    j += d.len;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t k = 1; k < buf.size(); ++k) {
    int ck = combining_class(buf[k]);
    if (ck == 0) continue;
    size_t m = k;
    uint32_t v = buf[k];
    while (m > 0) {
      int cm = combining_class(buf[m - 1]);
      if (cm <= ck) break;
      buf[m] = buf[m - 1];
      --m;
    }
    buf[m] = v;
  }
  // Canonical composition.
  std::vector<uint32_t> out;
  out.reserve(buf.size());
  long starter = -1;
  int last_class = 256;
  for (uint32_t ch : buf) {
    int cls = combining_class(ch);
    if (starter >= 0 && (last_class < cls || last_class == 0)) {
      if (uint32_t c = compose(out[static_cast<size_t>(starter)], ch)) {
        out[static_cast<size_t>(starter)] = c;
        continue;
      }
    }
    if (cls == 0) starter = static_cast<long>(out.size());
    last_class = cls;
    out.push_back(ch);
  }
  std::string res(s.substr(0, safe_start));
  res.reserve(s.size() + 8);
  for (uint32_t cp : out) append_utf8(res, cp);
  return res;
}

}  // namespace dice::text::unicode
