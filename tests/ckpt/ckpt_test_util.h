#pragma once
// Helpers shared by the ckpt tests: temp dirs, tiny tensors, byte-exact comparison, file surgery.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "dice/ckpt/h5.h"
#include "dice/ckpt/store.h"
#include "dice/util/fs.h"

namespace dice::ckpt::testing {

struct TempDir {
  std::string path = fs::make_temp_dir("dice_ckpt_test_");
  ~TempDir() {
    std::error_code ec;
    dice::fs::remove_tree(path);
  }
  std::string operator/(const std::string& sub) const { return path + "/" + sub; }
};

// Raw bytes of a tensor (contiguous CPU copy).
inline std::string raw_bytes(const torch::Tensor& t0) {
  torch::Tensor t = t0.contiguous().to(torch::kCPU);
  return std::string(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
}

// Same names, dtypes, shapes and bytes.
inline void expect_bit_exact(const NamedTensors& want, const NamedTensors& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(w.scalar_type(), it->second.scalar_type()) << name;
    EXPECT_EQ(w.sizes(), it->second.sizes()) << name;
    EXPECT_TRUE(raw_bytes(w) == raw_bytes(it->second)) << name << " differs";
  }
}

// A few tiny tensors of the dtypes a checkpoint holds (random values: bit patterns matter).
inline NamedTensors tiny_tensors(uint64_t seed) {
  torch::manual_seed(seed);
  NamedTensors t;
  t["model.embed_tokens.weight"] = torch::randn({16, 8}).to(torch::kBFloat16);
  t["model.layers.0.self_attn.q_proj.weight"] = torch::randn({8, 8}).to(torch::kBFloat16);
  t["model.layers.0.input_layernorm.weight"] = torch::randn({8});
  t["model.layers.0.mlp.up_proj.weight"] = torch::randn({4, 8}).to(torch::kHalf);
  t["lm_head.weight"] = torch::randn({16, 8}).to(torch::kFloat);
  t["scalar"] = torch::tensor(3.5);
  t["empty"] = torch::zeros({0, 4});
  t["ids"] = torch::arange(5, torch::kLong);
  return t;
}

// Absolute file offset of a contiguous dataset's first byte.
inline int64_t dataset_offset(const std::string& file, const std::string& dataset) {
  h5::init();
  h5::File f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(f.valid());
  h5::Dataset d(H5Dopen2(f.get(), dataset.c_str(), H5P_DEFAULT));
  EXPECT_TRUE(d.valid());
  haddr_t off = H5Dget_offset(d.get());
  EXPECT_NE(off, HADDR_UNDEF);
  return static_cast<int64_t>(off);
}

inline void flip_byte(const std::string& file, int64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(offset);
  f.write(&c, 1);
}

}  // namespace dice::ckpt::testing
