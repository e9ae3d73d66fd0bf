// Safetensors: round trips (dtypes, single file, shards + index) and rejection of bad files.
#include "dice/model/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::model {
namespace {

NamedTensors sample_tensors() {
  torch::manual_seed(3);
  NamedTensors t;
  t["a.bf16"] = torch::randn({3, 5}).to(torch::kBFloat16);
  t["b.f16"] = torch::randn({7}).to(torch::kFloat16);
  t["c.f32"] = torch::randn({2, 3, 4});
  t["d.i64"] = torch::arange(10, torch::kInt64).view({2, 5});
  t["e.i32"] = torch::arange(6, torch::kInt32);
  t["f.scalar"] = torch::tensor(3.5f);
  t["g.empty"] = torch::zeros({0, 4});
  t["h.bf16.odd"] = torch::randn({3}).to(torch::kBFloat16);  // 6 bytes: misaligns what follows
  t["i.f32.after"] = torch::randn({5});
  return t;
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_EQ(b.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(b.at(name).sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(b.at(name), t)) << name;
  }
}

std::string load_error_of(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, SingleFileRoundTrip) {
  auto dir = fs::make_temp_dir("dice-st");
  auto t = sample_tensors();
  save_safetensors(dir + "/x.safetensors", t, {{"format", "pt"}});
  auto back = load_safetensors(dir + "/x.safetensors");
  expect_same(t, back);
  auto h = read_safetensors_header(dir + "/x.safetensors");
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.tensors.size(), t.size());
  EXPECT_EQ(h.data_begin_bytes % 8, 0);
  // Loaded tensors are writable and independent of the file.
  back["c.f32"].add_(1);
  expect_same(t, load_safetensors(dir + "/x.safetensors"));
}

TEST(Safetensors, HfDirSingleAndSharded) {
  auto t = sample_tensors();
  auto single = fs::make_temp_dir("dice-st-single");
  save_hf_weights(single, t);
  EXPECT_TRUE(fs::exists(single + "/model.safetensors"));
  expect_same(t, load_safetensors(single));

  auto sharded = fs::make_temp_dir("dice-st-sharded");
  save_hf_weights(sharded, t, /*max_shard_bytes=*/64);
  EXPECT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  int shards = 0;
  for (const auto& e : std::filesystem::directory_iterator(sharded))
    if (e.path().extension() == ".safetensors") ++shards;
  EXPECT_GE(shards, 3);
  expect_same(t, load_safetensors(sharded));
  // A shard listed in the index that is gone.
  char first[64];
  std::snprintf(first, sizeof(first), "/model-00001-of-%05d.safetensors", shards);
  ASSERT_TRUE(fs::exists(sharded + first));
  std::filesystem::remove(sharded + first);
  EXPECT_NE(load_error_of(sharded).find("missing"), std::string::npos) << load_error_of(sharded);
}

TEST(Safetensors, LargeTensorIsMappedNotCorrupted) {
  auto dir = fs::make_temp_dir("dice-st-big");
  NamedTensors t{{"w", torch::randn({256, 1024}).to(torch::kBFloat16)}};
  save_safetensors(dir + "/w.safetensors", t);
  auto back = load_safetensors(dir + "/w.safetensors");
  EXPECT_TRUE(torch::equal(back.at("w").to(torch::kFloat32), t.at("w").to(torch::kFloat32)));
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  fs::write_file(path, bytes + header + data);
}

TEST(Safetensors, RejectsBadFiles) {
  auto dir = fs::make_temp_dir("dice-st-bad");
  const std::string f = dir + "/bad.safetensors";

  fs::write_file(f, "abc");
  EXPECT_NE(load_error_of(f).find("truncated"), std::string::npos) << load_error_of(f);

  write_raw(f, "{not json", "");
  EXPECT_NE(load_error_of(f).find("not valid JSON"), std::string::npos) << load_error_of(f);

  write_raw(f, R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", "ab");
  EXPECT_NE(load_error_of(f).find("Q4"), std::string::npos) << load_error_of(f);

  write_raw(f, R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(load_error_of(f).find("does not match"), std::string::npos) << load_error_of(f);

  write_raw(f, R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd");
  EXPECT_NE(load_error_of(f).find("truncated"), std::string::npos) << load_error_of(f);

  write_raw(f, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
            "abcdefgh");
  EXPECT_NE(load_error_of(f).find("overlap"), std::string::npos) << load_error_of(f);

  write_raw(f, R"({"x":{"dtype":"F32","shape":[1]}})", "abcd");
  EXPECT_NE(load_error_of(f).find("data_offsets"), std::string::npos) << load_error_of(f);

  // Header length beyond the file.
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(200);
  fs::write_file(f, bytes + "{}");
  EXPECT_NE(load_error_of(f).find("truncated"), std::string::npos) << load_error_of(f);

  // A good file cut short.
  save_safetensors(f, sample_tensors());
  auto full = fs::read_file(f);
  fs::write_file(f, full.substr(0, full.size() - 5));
  auto e = load_error_of(f);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(f), std::string::npos) << e;

  EXPECT_NE(load_error_of(dir + "/nope.safetensors").find("does not exist"), std::string::npos);
  auto empty_dir = fs::make_temp_dir("dice-st-empty");
  EXPECT_NE(load_error_of(empty_dir).find("No model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace dice::model
