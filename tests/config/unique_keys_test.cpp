// Duplicated keys in a config file are refused (yaml-cpp would keep one block silently); flatten.
#include <gtest/gtest.h>

#include <fstream>

#include "dice/config/config.h"
#include "dice/util/fs.h"

namespace dice::config {
namespace {

TEST(UniqueKeys, ADuplicatedBlockIsRefusedNamingKeyAndLines) {
  auto dir = fs::make_temp_dir("dice_config_dup.");
  std::ofstream(dir + "/c.yaml") << "sampler:\n  steps: 2\nout: x\nsampler:\n  temperature: 1\n";
  std::ofstream(dir + "/nested.yaml") << "judge:\n  trials: 1\n  trials: 2\n";
  try {
    load_tree(dir + "/c.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'sampler' appears twice (lines 1 and 4)"), std::string::npos) << e.what();
  }
  try {
    load_tree(dir + "/nested.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'judge.trials' appears twice"), std::string::npos) << e.what();
  }
  fs::remove_tree(dir);
}

TEST(UniqueKeys, FlattenGivesDottedKeys) {
  auto m = flatten(YAML::Load("a: {b: 1, c: [1, 2]}\nd: x\n"));
  EXPECT_EQ(m.at("a.b"), "1");
  EXPECT_EQ(m.at("a.c"), "[1, 2]");
  EXPECT_EQ(m.at("d"), "x");
}

}  // namespace
}  // namespace dice::config
