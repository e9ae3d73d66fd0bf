// util: errors, hashing, file helpers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/log.h"
#include "dice/util/tensorboard.h"

namespace dice {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hash::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hash::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hash::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, StreamingEqualsOneShot) {
  std::string data(1000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  hash::Sha256 h;
  for (size_t i = 0; i < data.size(); i += 37) h.update(std::string_view(data).substr(i, 37));
  EXPECT_EQ(h.hex_digest(), hash::sha256_hex(data));
}

TEST(TensorBoard, Crc32cKnownVectorsAndFraming) {
  // CRC-32C check values (RFC 3720 B.4): "123456789", 32 zero bytes
  EXPECT_EQ(tb::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(tb::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string dir = fs::make_temp_dir("dice_tb_test_");
  std::string path;
  {
    tb::EventWriter w(dir);
    w.scalars(7, {{"loss", 0.5}, {"rates/pass", 0.25}}, 1.7e9);
    path = w.path();
  }
  std::string bytes = fs::read_file(path);
  // two records (file_version, one event): each 8 length bytes + 4 + data + 4
  uint64_t n1 = 0;
  std::memcpy(&n1, bytes.data(), 8);
  ASSERT_LT(16 + n1, bytes.size());
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + 8, 4);
  EXPECT_EQ(crc, tb::masked_crc32c(bytes.data(), 8));
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  uint64_t n2 = 0;
  std::memcpy(&n2, bytes.data() + 16 + n1, 8);
  EXPECT_EQ(bytes.size(), 32 + n1 + n2);
  EXPECT_NE(bytes.find("rates/pass"), std::string::npos);
  fs::remove_tree(dir);
}

TEST(Fnv, DiffersOnChange) { EXPECT_NE(hash::fnv1a64("a"), hash::fnv1a64("b")); }

TEST(Error, RequireThrowsWithMessage) {
  try {
    DICE_REQUIRE(1 + 1 == 3, "value ", 42, " is wrong");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "value 42 is wrong");
  }
}

TEST(CheckDeathTest, FatalNamesStatementAndLocation) {
  EXPECT_DEATH(DICE_CHECK(2 < 1, "detail ", 7), "2 < 1 failed at .*util_test.cpp:[0-9]+: detail 7");
}

namespace {
[[gnu::noinline]] void crash_here(volatile int* p) { *p = 1; }
}  // namespace

TEST(CheckDeathTest, CrashHandlerPrintsSignalAndBacktraceThenDiesOfTheSignal) {
  EXPECT_EXIT(
      {
        install_crash_handler();
        crash_here(nullptr);
      },
      ::testing::KilledBySignal(SIGSEGV), "fatal signal: SIGSEGV; backtrace.*\\n.*\\[0x");
}

TEST(Fs, RemoveTreeRemovesEverythingAndNeverFollowsSymlinks) {
  std::string outside = fs::make_temp_dir("dice_util_keep_");
  fs::write_file(outside + "/keep.txt", "keep");
  std::string dir = fs::make_temp_dir("dice_util_tree_");
  ASSERT_EQ(::mkdir((dir + "/a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir + "/a/b").c_str(), 0755), 0);
  fs::write_file(dir + "/a/b/f", "x");
  fs::write_file(dir + "/top", "y");
  ASSERT_EQ(::symlink(outside.c_str(), (dir + "/a/link").c_str()), 0);
  ASSERT_EQ(::mkdir((dir + "/locked").c_str(), 0755), 0);
  fs::write_file(dir + "/locked/f", "z");
  ASSERT_EQ(::chmod((dir + "/locked").c_str(), 0), 0);  // unreadable for a non-root owner
  fs::clear_dir(dir + "/a");
  EXPECT_TRUE(fs::exists(dir + "/a"));
  EXPECT_FALSE(fs::exists(dir + "/a/b"));
  EXPECT_TRUE(fs::remove_tree(dir));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(fs::read_file(outside + "/keep.txt"), "keep");
  EXPECT_TRUE(fs::remove_tree(dir));  // already gone: still true
  EXPECT_TRUE(fs::remove_tree(outside));
}

TEST(Fs, AtomicWriteAndReadBack) {
  std::string dir = fs::make_temp_dir("dice_util_test_");
  std::string p = dir + "/f.txt";
  fs::write_file_atomic(p, "hello");
  EXPECT_EQ(fs::read_file(p), "hello");
  EXPECT_TRUE(fs::exists(p));
  EXPECT_THROW(fs::read_file(dir + "/missing"), Error);
}

TEST(Fs, ForEachLineSkipsBlankLinesAndCountsFromOne) {
  std::string dir = fs::make_temp_dir("dice_lines_");
  fs::write_file(dir + "/a.jsonl", "{\"a\": 1}\r\n\n   \n{\"b\": 2}\nlast-without-newline");
  std::vector<std::pair<int, std::string>> got;
  fs::for_each_line(dir + "/a.jsonl", [&](int n, const std::string& line) { got.emplace_back(n, line); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(1, std::string("{\"a\": 1}")));
  EXPECT_EQ(got[1], std::make_pair(4, std::string("{\"b\": 2}")));
  EXPECT_EQ(got[2], std::make_pair(5, std::string("last-without-newline")));
  EXPECT_THROW(fs::for_each_line(dir + "/missing.jsonl", [](int, const std::string&) {}), Error);
  fs::remove_tree(dir);
}

TEST(Log, IdentityNamesRankAndRole) {
  log::set_identity(3, 4, "actor");
  EXPECT_NE(log::identity().find("[r3 actor "), std::string::npos);
  log::set_identity(0, 1, "main");
}

}  // namespace
}  // namespace dice
