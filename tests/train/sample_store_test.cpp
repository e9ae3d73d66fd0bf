// SampleStore: append, resume keys, tolerance of a cut-off record, ordered merge.
#include <gtest/gtest.h>

#include <fstream>

#include "dice/train/sample_store.h"
#include "dice/util/fs.h"

namespace dice::train {
namespace {

nlohmann::json rec(const std::string& task, int sample) {
  return {{"task_id", task}, {"sample_id", sample}, {"verdict", {{"correct", false}}}};
}

TEST(SampleStore, AppendResumeMerge) {
  std::string dir = fs::make_temp_dir("dice_store_");
  {
    SampleStore r0(dir, 0), r1(dir, 1);
    r0.append(rec("b", 0));
    r1.append(rec("a", 1));
    r1.append(rec("a", 0));
  }
  // An interrupted write leaves half a line behind: it is ignored and redone.
  {
    std::ofstream out(dir + "/parts/samples.rank1.jsonl", std::ios::app);
    out << "{\"task_id\": \"c\", \"sam";
  }
  SampleStore again(dir, 0);
  auto keys = again.done_keys();
  EXPECT_EQ(keys, (std::set<std::string>{"a#0", "a#1", "b#0"}));
  again.append(rec("b", 0));  // duplicate key: merged once
  SampleStore r1_again(dir, 1);
  r1_again.append(rec("c", 0));  // appended after the cut-off line: must not be glued to it
  auto merged = again.merge({"a", "b", "c"});
  ASSERT_EQ(merged.size(), 4u);
  EXPECT_EQ(merged[0]["task_id"], "a");
  EXPECT_EQ(merged[0]["sample_id"], 0);
  EXPECT_EQ(merged[1]["sample_id"], 1);
  EXPECT_EQ(merged[2]["task_id"], "b");
  EXPECT_EQ(merged[3]["task_id"], "c");
  auto text = fs::read_file(dir + "/samples.jsonl");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
}

// A sampled response is token pieces: a small model can end a response inside a multi-byte
// character, or put one where it does not belong. The record is kept, the bad bytes as U+FFFD.
TEST(SampleStore, ResponseWithInvalidUtf8IsKept) {
  std::string dir = fs::make_temp_dir("dice_store_");
  auto r = rec("a", 0);
  r["response"] = std::string("x = 1; \xe2\x80 y \xff end");
  {
    SampleStore s(dir, 0);
    s.append(r);
  }
  SampleStore again(dir, 0);
  EXPECT_EQ(again.done_keys(), (std::set<std::string>{"a#0"}));
  auto merged = again.merge({"a"});
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0]["response"].get<std::string>(), "x = 1; \xef\xbf\xbd y \xef\xbf\xbd end");
  auto back = nlohmann::json::parse(fs::read_file(dir + "/samples.jsonl"));
  EXPECT_EQ(back["response"], merged[0]["response"]);
}

}  // namespace
}  // namespace dice::train
