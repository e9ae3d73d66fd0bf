// NFC and character classes against facts from the Unicode standard.
#include <gtest/gtest.h>

#include "dice/text/unicode.h"

namespace u = dice::text::unicode;

TEST(Unicode, Classes) {
  EXPECT_EQ(u::char_class('a'), u::kLetter);
  EXPECT_EQ(u::char_class('7'), u::kNumber);
  EXPECT_EQ(u::char_class(' '), u::kSpace);
  EXPECT_EQ(u::char_class('\n'), u::kSpace);
  EXPECT_EQ(u::char_class('_'), u::kOther);
  EXPECT_EQ(u::char_class(0x4E2D), u::kLetter);   // 中
  EXPECT_EQ(u::char_class(0x00BD), u::kNumber);   // ½ (No)
  EXPECT_EQ(u::char_class(0x2167), u::kNumber);   // Ⅷ (Nl)
  EXPECT_EQ(u::char_class(0x3000), u::kSpace);    // ideographic space
  EXPECT_EQ(u::char_class(0x0085), u::kSpace);    // NEL is White_Space
  EXPECT_EQ(u::char_class(0xFEFF), u::kOther);    // BOM is not
  EXPECT_EQ(u::char_class(0x1F600), u::kOther);   // 😀
  EXPECT_EQ(u::char_class(0x20000), u::kLetter);  // CJK extension B
  EXPECT_EQ(u::char_class(0x1D7CE), u::kNumber);  // mathematical bold digit zero
  EXPECT_EQ(u::char_class(0x0301), u::kOther);    // combining acute (Mn)
  EXPECT_EQ(u::char_class(u::kInvalidBase + 0xFF), u::kOther);
}

TEST(Unicode, DecodeKeepsInvalidBytes) {
  std::string s = "a\xC3\xA9\xFF\xE2\x82\xAC\xED\xA0\x80\xF0\x9F\x98\x80\xC0\xAF\xE2\x82";
  std::string back;
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    auto d = u::decode_utf8(s.data() + i, s.size() - i);
    cps.push_back(d.cp);
    u::append_utf8(back, d.cp);
    i += d.len;
  }
  EXPECT_EQ(back, s);
  std::vector<uint32_t> want = {'a', 0xE9, u::kInvalidBase + 0xFF, 0x20AC, u::kInvalidBase + 0xED,
                                u::kInvalidBase + 0xA0, u::kInvalidBase + 0x80, 0x1F600, u::kInvalidBase + 0xC0,
                                u::kInvalidBase + 0xAF, u::kInvalidBase + 0xE2, u::kInvalidBase + 0x82};
  EXPECT_EQ(cps, want);
  EXPECT_FALSE(u::is_valid_utf8(s));
  EXPECT_TRUE(u::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
}

TEST(Unicode, Nfc) {
  EXPECT_EQ(u::nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(u::nfc("e\xCC\x81"), "\xC3\xA9");                      // e + acute -> é
  EXPECT_EQ(u::nfc("caf\x65\xCC\x81 ok"), "caf\xC3\xA9 ok");
  EXPECT_EQ(u::nfc("\xE2\x84\xAB"), "\xC3\x85");                   // Å (angstrom) -> Å
  EXPECT_EQ(u::nfc("\xE2\x84\xA6"), "\xCE\xA9");                   // Ω ohm -> Ω
  // a + dot below + dot above (already ordered) -> ạ̇ stays ạ + U+0307
  EXPECT_EQ(u::nfc("a\xCC\x87\xCC\xA3"), "\xE1\xBA\xA1\xCC\x87");  // reordered: ccc 220 before 230
  EXPECT_EQ(u::nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul jamo -> 한
  EXPECT_EQ(u::nfc("\xED\x95\x9C"), "\xED\x95\x9C");
  EXPECT_EQ(u::nfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");   // 가 + ᆨ -> 각
  EXPECT_EQ(u::nfc("\xE0\xA4\xA8\xE0\xA4\xBC"), "\xE0\xA4\xA9");  // न + nukta -> ऩ
  EXPECT_EQ(u::nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // क़ is excluded from composition
  EXPECT_EQ(u::nfc("\xE0\xA4\x95\xE0\xA4\xBC"), "\xE0\xA4\x95\xE0\xA4\xBC");
  EXPECT_EQ(u::nfc("\xFF" "e\xCC\x81\xFE"), "\xFF\xC3\xA9\xFE");   // invalid bytes kept
  EXPECT_EQ(u::nfc("\xCC\x81" "a"), "\xCC\x81" "a");                 // leading combining mark stays
}
