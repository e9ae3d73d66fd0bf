// config: typed loading, overrides, rejection of unknown keys and bad values.
#include <gtest/gtest.h>

#include <filesystem>

#include "dice/config/config.h"
#include "dice/util/fs.h"

namespace dice::config {
namespace {

struct Inner {
  int block_size = 4;
  std::string strategy = "static";
  std::vector<int> stop_ids{151645};
  template <class V> void visit(V& v) {
    v("block_size", block_size);
    v.choice("strategy", strategy, {"static", "dynamic"});
    v("stop_ids", stop_ids);
  }
  void validate() const { DICE_REQUIRE(block_size > 0, "sampler.block_size must be > 0, got ", block_size); }
};

struct Root {
  double lr = 1e-6;
  bool colocated = true;
  std::string name = "run";
  Inner sampler;
  template <class V> void visit(V& v) {
    v("lr", lr);
    v("colocated", colocated);
    v("name", name);
    v("sampler", sampler);
  }
};

std::string error_of(const YAML::Node& n) {
  try {
    load<Root>(n);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsWhenEmpty) {
  Root r = load<Root>(YAML::Node(YAML::NodeType::Map));
  EXPECT_EQ(r.sampler.block_size, 4);
  EXPECT_DOUBLE_EQ(r.lr, 1e-6);
}

TEST(Config, LoadsValuesAndOverrides) {
  YAML::Node n = YAML::Load("lr: 2.0e-5\nsampler: {block_size: 8, strategy: dynamic}\n");
  apply_overrides(n, {"sampler.block_size=16", "colocated=false", "sampler.stop_ids=[1, 2]", "name=x"});
  Root r = load<Root>(n);
  EXPECT_DOUBLE_EQ(r.lr, 2e-5);
  EXPECT_EQ(r.sampler.block_size, 16);
  EXPECT_EQ(r.sampler.strategy, "dynamic");
  EXPECT_FALSE(r.colocated);
  EXPECT_EQ(r.sampler.stop_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(r.name, "x");
}

TEST(Config, RejectsUnknownKeyWithPath) {
  auto msg = error_of(YAML::Load("sampler: {blok_size: 8}"));
  EXPECT_NE(msg.find("unknown config key 'sampler.blok_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("block_size"), std::string::npos) << msg;
}

TEST(Config, RejectsBadTypesAndChoices) {
  EXPECT_NE(error_of(YAML::Load("sampler: {block_size: four}")).find("'sampler.block_size' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(YAML::Load("sampler: {block_size: 1.5}")).find("sampler.block_size"), std::string::npos);
  EXPECT_NE(error_of(YAML::Load("colocated: maybe")).find("'colocated' must be a boolean"), std::string::npos);
  EXPECT_NE(error_of(YAML::Load("sampler: {strategy: random}")).find("must be one of 'static', 'dynamic'"),
            std::string::npos);
  EXPECT_NE(error_of(YAML::Load("sampler: 3")).find("'sampler' must be a mapping"), std::string::npos);
  EXPECT_NE(error_of(YAML::Load("sampler: {block_size: 0}")).find("must be > 0"), std::string::npos);
}

TEST(Config, ResolvedTreeRoundTrips) {
  Root r;
  r.sampler.block_size = 32;
  YAML::Node n = to_yaml(r);
  Root back = load<Root>(YAML::Load(dump(n)));
  EXPECT_EQ(back.sampler.block_size, 32);
  EXPECT_EQ(back.sampler.stop_ids, r.sampler.stop_ids);
}

// The sentence load_tree(path) refuses the file with; "" when it loads.
std::string tree_error(const std::string& path) {
  try {
    load_tree(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, FileErrorsNameTheFile) {
  std::string dir = fs::make_temp_dir("dice_cfg_");
  EXPECT_NE(tree_error(dir + "/nope.yaml").find("nope.yaml' does not exist"), std::string::npos);
  fs::write_file(dir + "/bad.yaml", "a: [1, 2\n");
  EXPECT_THROW(load_tree(dir + "/bad.yaml"), Error);
  YAML::Node root;
  EXPECT_THROW(apply_overrides(root, {"novalue"}), Error);
}

TEST(Config, IncludeLaysTheFileOverItsBase) {
  std::string dir = fs::make_temp_dir("dice_cfg_");
  std::filesystem::create_directories(dir + "/sub");
  fs::write_file(dir + "/base.yaml", "lr: 0.5\nname: base\nsampler: {block_size: 8, strategy: dynamic, stop_ids: [1, 2]}\n");
  fs::write_file(dir + "/sub/top.yaml", "include: ../base.yaml\nname: top\nsampler: {block_size: 2, stop_ids: [7]}\n");
  Root r = load<Root>(load_tree(dir + "/sub/top.yaml", {"sampler.block_size=3"}));
  EXPECT_EQ(r.lr, 0.5);                          // from the base
  EXPECT_EQ(r.name, "top");                      // the file's own
  EXPECT_EQ(r.sampler.strategy, "dynamic");      // mappings merge key by key
  EXPECT_EQ(r.sampler.block_size, 3);            // --set last
  EXPECT_EQ(r.sampler.stop_ids, std::vector<int>{7});  // lists replace
  // a cycle and a missing base are refused with a sentence naming the files
  fs::write_file(dir + "/a.yaml", "include: b.yaml\n");
  fs::write_file(dir + "/b.yaml", "include: a.yaml\n");
  const std::string cycle = tree_error(dir + "/a.yaml");
  EXPECT_NE(cycle.find("includes itself"), std::string::npos) << cycle;
  fs::write_file(dir + "/c.yaml", "include: gone.yaml\n");
  const std::string missing = tree_error(dir + "/c.yaml");
  EXPECT_NE(missing.find("gone.yaml' does not exist (included by"), std::string::npos) << missing;
  fs::remove_tree(dir);
}

struct Helped {
  int steps = 4;
  Inner sampler;
  template <class V> void visit(V& v) {
    v("steps", steps, "diffusion steps per block");
    v("sampler", sampler, "how to sample");
  }
};

TEST(Config, DescribeListsEveryKeyWithDefaultAndHelp) {
  auto keys = describe(Helped{});
  ASSERT_EQ(keys.size(), 5u);
  EXPECT_EQ(keys[0].key, "steps");
  EXPECT_EQ(keys[0].default_text, "4");
  EXPECT_EQ(keys[0].help, "diffusion steps per block");
  EXPECT_TRUE(keys[1].section);
  EXPECT_EQ(keys[3].key, "sampler.strategy");
  EXPECT_EQ(keys[3].choices, (std::vector<std::string>{"static", "dynamic"}));
  EXPECT_EQ(keys[4].default_text, "[151645]");
  const std::string md = describe_markdown(keys);
  EXPECT_NE(md.find("| `steps` | integer | `4` | diffusion steps per block |"), std::string::npos) << md;
}

}  // namespace
}  // namespace dice::config
