// ckpt/store: checksummed HDF5 datasets — dtypes, shapes, strings, corruption detection.
#include "dice/ckpt/store.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt_test_util.h"
#include "dice/util/error.h"

namespace dice::ckpt {
namespace {

using testing::TempDir;

TEST(Store, TensorsRoundTripBitExactAllDtypes) {
  TempDir dir;
  NamedTensors want = testing::tiny_tensors(1);
  want["flags"] = torch::tensor({true, false, true});
  want["bytes"] = torch::arange(7, torch::kByte);
  want["i32"] = torch::arange(6, torch::kInt).reshape({2, 3});
  want["f64"] = torch::randn({3}, torch::kDouble);
  {
    Store s = Store::create(dir / "m.h5", "model");
    s.write_tensors("", want);
    s.close();
  }
  Store s = Store::open(dir / "m.h5", "model");
  testing::expect_bit_exact(want, s.read_tensors(""));
  EXPECT_TRUE(s.verify_all().empty());
  auto infos = s.list_tensors("");
  ASSERT_EQ(infos.size(), want.size());
  for (const auto& info : infos) {
    EXPECT_EQ(info.dtype, want.at(info.name).scalar_type()) << info.name;
    EXPECT_EQ(info.bytes, want.at(info.name).numel() * want.at(info.name).element_size()) << info.name;
  }
}

TEST(Store, Bf16StoredAsUint16WithDtypeAttribute) {
  TempDir dir;
  {
    Store s = Store::create(dir / "m.h5", "model");
    s.write_tensors("", {{"w", torch::ones({2, 2}, torch::kBFloat16)}});
    s.close();
  }
  h5::init();
  h5::File f(H5Fopen((dir / "m.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  h5::Dataset d(H5Dopen2(f.get(), "w", H5P_DEFAULT));
  h5::Datatype t(H5Dget_type(d.get()));
  EXPECT_EQ(H5Tget_class(t.get()), H5T_INTEGER);
  EXPECT_EQ(H5Tget_size(t.get()), 2u);
  EXPECT_EQ(H5Tget_sign(t.get()), H5T_SGN_NONE);
  h5::Attribute a(H5Aopen(d.get(), "dtype", H5P_DEFAULT));
  h5::Datatype at(H5Aget_type(a.get()));
  std::string v(H5Tget_size(at.get()), '\0');
  H5Aread(a.get(), at.get(), v.data());
  EXPECT_EQ(v, "bfloat16");
}

TEST(Store, ScalarsStringsBytesAndGroups) {
  TempDir dir;
  std::string blob("\0\x01\xff binary\0", 11);
  {
    Store s = Store::create(dir / "s.h5", "state");
    s.write_i64("step", -42);
    s.write_string("yaml", "a: 1\nb: [x, y]\n");
    s.write_string("empty", "");
    s.write_bytes("rng/rank3", blob);
    s.write_tensors("m", {{"p", torch::ones({3})}});
    s.close();
  }
  Store s = Store::open(dir / "s.h5", "state");
  EXPECT_EQ(s.read_i64("step"), -42);
  EXPECT_EQ(s.read_string("yaml"), "a: 1\nb: [x, y]\n");
  EXPECT_EQ(s.read_string("empty"), "");
  EXPECT_EQ(s.read_bytes("rng/rank3"), blob);
  EXPECT_TRUE(s.has("rng/rank3"));
  EXPECT_FALSE(s.has("rng/rank4"));
  EXPECT_FALSE(s.has("nothere/x"));
  EXPECT_EQ(s.list("rng"), std::vector<std::string>{"rank3"});
  EXPECT_EQ(s.read_tensors("m").size(), 1u);
  EXPECT_TRUE(s.read_tensors("absent").empty());
  EXPECT_TRUE(s.verify_all().empty());
}

TEST(Store, WrongKindAndMissingFileAndBadNames) {
  TempDir dir;
  {
    Store s = Store::create(dir / "s.h5", "state");
    EXPECT_THROW(s.write_tensors("", {{"a/b", torch::ones({1})}}), Error);
    s.close();
  }
  try {
    Store::open(dir / "s.h5", "model");
    FAIL() << "wrong kind accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'state' data where 'model'"), std::string::npos) << e.what();
  }
  try {
    Store::open(dir / "nope.h5", "model");
    FAIL() << "missing file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  fs::write_file(dir / "junk.h5", "this is not an HDF5 file at all");
  try {
    Store::open(dir / "junk.h5", "model");
    FAIL() << "junk accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt or truncated"), std::string::npos) << e.what();
  }
}

TEST(Store, FlippedByteFailsChecksumNamingDataset) {
  TempDir dir;
  const std::string file = dir / "m.h5";
  {
    Store s = Store::create(file, "model");
    s.write_tensors("", testing::tiny_tensors(2));
    s.close();
  }
  testing::flip_byte(file, testing::dataset_offset(file, "model.layers.0.self_attn.q_proj.weight") + 5);
  Store s = Store::open(file, "model");
  try {
    s.read_tensors("");
    FAIL() << "corruption not detected";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.layers.0.self_attn.q_proj.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("SHA-256"), std::string::npos) << msg;
  }
  auto failures = s.verify_all();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("q_proj"), std::string::npos);
  // Skipping verification reads the (corrupt) data without complaint.
  EXPECT_EQ(s.read_tensors("", /*verify=*/false).size(), testing::tiny_tensors(2).size());
}

TEST(Store, TruncatedFileRefused) {
  TempDir dir;
  const std::string file = dir / "m.h5";
  {
    Store s = Store::create(file, "model");
    s.write_tensors("", testing::tiny_tensors(3));
    s.close();
  }
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  try {
    Store s = Store::open(file, "model");
    s.read_tensors("");
    FAIL() << "truncated file accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("corrupt or truncated"), std::string::npos) << msg;
  }
}

TEST(Store, FormatVersionMismatchIsClearError) {
  TempDir dir;
  const std::string file = dir / "m.h5";
  {
    Store s = Store::create(file, "model");
    s.close();
  }
  {
    h5::init();
    h5::File f(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    h5::Attribute a(H5Aopen(f.get(), "dice_format_version", H5P_DEFAULT));
    int64_t v = kFormatVersion + 1;
    ASSERT_GE(H5Awrite(a.get(), H5T_NATIVE_INT64, &v), 0);
  }
  EXPECT_EQ(Store::peek_format_version(file), kFormatVersion + 1);
  try {
    Store::open(file, "model");
    FAIL() << "other format version accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(dice::str("format version ", kFormatVersion + 1)), std::string::npos) << msg;
    EXPECT_NE(msg.find(dice::str("reads format version ", kFormatVersion)), std::string::npos) << msg;
  }
}

TEST(Store, LargeTensorHashedOnWorkerThread) {
  // > 1 MiB takes the asynchronous hashing path.
  TempDir dir;
  NamedTensors want{{"big", torch::randn({600, 1024}).to(torch::kBFloat16)}, {"big2", torch::randn({300, 1024})}};
  {
    Store s = Store::create(dir / "m.h5", "model");
    s.write_tensors("", want);
    s.close();
  }
  Store s = Store::open(dir / "m.h5", "model");
  testing::expect_bit_exact(want, s.read_tensors(""));
}

}  // namespace
}  // namespace dice::ckpt
