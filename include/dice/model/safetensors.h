#pragma once
// Safetensors files (the Hugging Face weight format): read, write, shard.
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
// then the raw little-endian tensor bytes; offsets are relative to the end of the header.
// Supported dtypes: BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL.
//
// Reads memory-map the file and validate the header before touching data (offsets in range,
// known dtype, shape * element size == byte span, no overlap); a bad file is a dice::Error naming
// the file and the tensor. Returned tensors are CPU tensors that own their memory or keep the
// mapping alive (copy-on-write), so they stay valid after the call and may be modified.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dice::model {

using NamedTensors = std::map<std::string, torch::Tensor>;

// One entry of a safetensors header.
struct TensorEntry {
  std::string name;
  std::string dtype;           // as written in the file, e.g. "BF16"
  std::vector<int64_t> shape;
  int64_t begin_bytes = 0;     // relative to the start of the data section
  int64_t end_bytes = 0;
};

// The validated header of one file (tensors sorted by name) and its "__metadata__".
struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  int64_t data_begin_bytes = 0;  // absolute file offset of the data section
};
SafetensorsHeader read_safetensors_header(const std::string& file);

// file_or_hf_dir: a .safetensors file, or a directory holding model.safetensors or
// model.safetensors.index.json (+ its shards). Tensors keep their stored dtype, on CPU.
NamedTensors load_safetensors(const std::string& file_or_hf_dir);

// Writes one file (tensors are made contiguous and moved to CPU; stored dtype = tensor dtype).
// Written atomically (temp file + rename).
void save_safetensors(const std::string& file, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes HF-style weights into dir (created if missing): max_shard_bytes == 0 -> model.safetensors;
// otherwise model-0000k-of-0000n.safetensors shards of at most max_shard_bytes of tensor data
// each (a single larger tensor gets its own shard) plus model.safetensors.index.json.
void save_hf_weights(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes = 0);

// "BF16" <-> torch dtype; throws dice::Error for an unknown name / unsupported dtype.
torch::Dtype safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(torch::Dtype dtype);

}  // namespace dice::model
