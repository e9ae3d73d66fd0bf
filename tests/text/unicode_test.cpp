// NFC and character classes against facts from the Unicode standard.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "dice/util/fs.h"

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

TEST(Unicode, NfcMatchesPythonOnRandomText) {
  // Python's unicodedata (the tables' source, but its own NFC implementation) as the reference.
  const std::vector<uint32_t> pool = {
      'a', 'e', 'o', 'A', 'K', ' ', '1', 0xE9, 0xC5, 0x212B, 0x2126, 0x212A, 0x0301, 0x0300, 0x0308, 0x0323,
      0x0327, 0x0345, 0x0307, 0x031B, 0x05B0, 0x05BC, 0x0591, 0x0915, 0x093C, 0x0958, 0x0929, 0x0928, 0x1100,
      0x1161, 0x11A8, 0xAC00, 0xAC01, 0xD55C, 0x1F00, 0x03B1, 0x0391, 0x1E9B, 0x0F73, 0x0F71, 0x0F72, 0x0F80,
      0x1D15E, 0x1D165, 0x1D16D, 0x2ADC, 0x0CCA, 0x0CC6, 0x0CC2, 0x0CD5, 0x3099, 0x304B, 0x304C, 0xFB2C, 0x4E2D,
      0x1F600, 0x0E01, 0x0E31, 0x0344, 0x0340, 0x0374, 0x037E, 0x0387, 0xF900, 0x2F800, 0x1E0A, 0x1E0C, 0x0112};
  std::mt19937 rng(5);
  std::vector<std::string> lines;
  std::string all;
  for (int k = 0; k < 20000; ++k) {
    std::string s;
    size_t n = 1 + rng() % 12;
    for (size_t m = 0; m < n; ++m) u::append_utf8(s, pool[rng() % pool.size()]);
    lines.push_back(s);
    all += s + "\n";
  }
  std::string dir = dice::fs::make_temp_dir("dice-nfc");
  dice::fs::write_file(dir + "/in.txt", all);
  std::string cmd = std::string(DICE_PYTHON) +
                    " -c \"import sys,unicodedata as u; d=open(sys.argv[1],encoding='utf-8').read(); "
                    "open(sys.argv[2],'w',encoding='utf-8',newline='').write(u.normalize('NFC',d))\" " +
                    dir + "/in.txt " + dir + "/out.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "python failed: " << cmd;
  std::string want = dice::fs::read_file(dir + "/out.txt");
  EXPECT_TRUE(u::nfc(all) == want) << "nfc of the whole text differs from Python's";
  size_t pos = 0, bad = 0;
  for (auto& s : lines) {
    size_t e = want.find('\n', pos);
    std::string w = want.substr(pos, e - pos);
    pos = e + 1;
    if (u::nfc(s) != w && bad++ < 5) ADD_FAILURE() << "nfc differs from Python for " << ::testing::PrintToString(s);
  }
  EXPECT_EQ(bad, 0u);
}
