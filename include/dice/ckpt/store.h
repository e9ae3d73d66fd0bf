#pragma once
// Store: one HDF5 file of checksummed datasets — the building block of a checkpoint's model.h5,
// optim_rank<k>.h5 and state.h5.
//
// Contract:
//  - Every dataset carries a "sha256" attribute: SHA-256 of its raw little-endian bytes.
//    Reads verify it unless asked not to; a mismatch or an unreadable dataset throws a
//    dice::Error naming the file and the dataset ("... is corrupt or truncated ...").
//  - Tensors keep dtype and shape. fp32/fp64/fp16 are stored as IEEE floats, bf16 as 16-bit
//    unsigned integers; every tensor dataset has a "dtype" attribute ("float32", "bfloat16", ...)
//    that decides the dtype on read. Tensors may live on any device; reads return CPU tensors.
//  - The file root carries "dice_format_version" and "dice_kind" ("model", "optim", "state");
//    open() refuses another format version or kind with a sentence saying so.
//  - Dataset names are HF parameter names (anything without '/'); `group` is "" (the root) or a
//    group name such as "m" (created on first write).
//  - Hashing runs on worker threads, overlapping the (single-threaded) HDF5 I/O.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/model/safetensors.h"

namespace dice::ckpt {

// HF parameter name -> tensor: the model module's one definition.
using model::NamedTensors;

// Version of the on-disk layout described in docs above; bump on any incompatible change.
constexpr int64_t kFormatVersion = 1;

struct TensorInfo {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

// "float32", "bfloat16", ... (the dtype attribute values).
std::string dtype_name(torch::ScalarType t);

class Store {
 public:
  // Creates (truncates) `path` for writing; sets the root attributes.
  static Store create(const std::string& path, const std::string& kind);
  // Opens `path` read-only; checks the format version and kind.
  static Store open(const std::string& path, const std::string& kind);
  // Reads the root's format version without checking it (-1 when absent).
  static int64_t peek_format_version(const std::string& path);

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& path() const;

  void write_tensors(const std::string& group, const NamedTensors& tensors);
  NamedTensors read_tensors(const std::string& group, bool verify = true);
  std::vector<TensorInfo> list_tensors(const std::string& group);

  void write_i64(const std::string& name, int64_t v);
  int64_t read_i64(const std::string& name, bool verify = true);
  void write_string(const std::string& name, const std::string& s);  // text (UTF-8)
  std::string read_string(const std::string& name, bool verify = true);
  void write_bytes(const std::string& name, const std::string& bytes);  // opaque bytes
  std::string read_bytes(const std::string& name, bool verify = true);
  bool has(const std::string& name);  // a dataset or group "a" or "a/b"
  std::vector<std::string> list(const std::string& group);  // child names, sorted

  // Reads every dataset in the file and checks its checksum; returns one sentence per failure.
  std::vector<std::string> verify_all();
  // Number of datasets and their total bytes.
  std::pair<int64_t, int64_t> dataset_stats();

  // Flushes and closes; throws if HDF5 could not finish the file (e.g. disk full).
  void close();

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::ckpt
