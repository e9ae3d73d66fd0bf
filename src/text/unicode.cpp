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
  if (cp >= 0xC0 && cp < kInvalidBase) {  // nothing below U+00C0 decomposes
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

namespace {

// Full NFC (decompose, reorder, compose) of a region, appended to `out`.
void nfc_region(std::string_view s, std::string& out) {
  thread_local std::vector<uint32_t> buf, res;
  buf.clear();
  for (size_t j = 0; j < s.size();) {
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
    while (m > 0 && combining_class(buf[m - 1]) > ck) {
      buf[m] = buf[m - 1];
      --m;
    }
    buf[m] = v;
  }
  // Canonical composition.
  res.clear();
  long starter = -1;
  int last_class = 256;
  for (uint32_t ch : buf) {
    int cls = combining_class(ch);
    if (starter >= 0 && (last_class < cls || last_class == 0)) {
      if (uint32_t c = compose(res[static_cast<size_t>(starter)], ch)) {
        res[static_cast<size_t>(starter)] = c;
        continue;
      }
    }
    if (cls == 0) starter = static_cast<long>(res.size());
    last_class = cls;
    res.push_back(ch);
  }
  for (uint32_t cp : res) append_utf8(out, cp);
}

}  // namespace

std::string nfc(std::string_view s) {
  // Only regions around NFC-unsafe code points need work. A region starts at the last safe code
  // point before an unsafe one (it may compose with what follows) and ends before the next safe
  // one: a safe code point is a starter that never composes with what precedes it, so nothing
  // interacts across it. Everything else is copied as is.
  std::string out;
  size_t copied = 0, last_safe = 0, i = 0;
  while (i < s.size()) {
    uint64_t w;  // skip ASCII (always safe) eight bytes at a time
    if (i + 8 <= s.size() && (std::memcpy(&w, s.data() + i, 8), (w & 0x8080808080808080ull) == 0)) {
      i += 8;
      last_safe = i - 1;
      continue;
    }
    auto d = decode_utf8(s.data() + i, s.size() - i);
    if (d.cp < 0x80 || !nfc_unsafe(d.cp)) {
      last_safe = i;
      i += d.len;
      continue;
    }
    size_t start = std::max(last_safe, copied);
    size_t j = i + d.len;
    while (j < s.size()) {
      auto e = decode_utf8(s.data() + j, s.size() - j);
      if (e.cp < 0x80 || !nfc_unsafe(e.cp)) break;
      j += e.len;
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.data() + copied, start - copied);
    nfc_region(s.substr(start, j - start), out);
    copied = j;
    i = j;
  }
  if (copied == 0) return std::string(s);
  out.append(s.data() + copied, s.size() - copied);
  return out;
}

}  // namespace dice::text::unicode
