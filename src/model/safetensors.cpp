// Safetensors read (memory-mapped, validated) and write (single file, HF shards + index).
#include "dice/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::model {
namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

// Header length is a u64; anything beyond this is a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeInfo {
  const char* name;
  torch::Dtype dtype;
  int64_t size_bytes;
};
const DtypeInfo kDtypes[] = {
    {"BF16", torch::kBFloat16, 2}, {"F16", torch::kFloat16, 2}, {"F32", torch::kFloat32, 4},
    {"F64", torch::kFloat64, 8},   {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},     {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// A read-only-file, copy-on-write memory mapping (RAII).
class Mapping {
 public:
  explicit Mapping(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DICE_REQUIRE(fd >= 0, "Cannot open safetensors file ", path, ": ", std::strerror(errno), ".");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      throw Error(str("Cannot stat ", path, ": ", std::strerror(e), "."));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      int e = errno;
      ::close(fd);
      DICE_REQUIRE(p != MAP_FAILED, "Cannot memory-map ", path, ": ", std::strerror(e), ".");
      data_ = static_cast<uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (data_) ::munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

SafetensorsHeader parse_header(const std::string& file, const uint8_t* data, size_t size) {
  DICE_REQUIRE(size >= 8, "Safetensors file ", file, " is truncated: ", size, " bytes, less than the 8-byte header length.");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  DICE_REQUIRE(n <= kMaxHeaderBytes, "Safetensors file ", file, " declares a ", n,
               "-byte header, which is implausible: the file is corrupt or not safetensors.");
  DICE_REQUIRE(8 + n <= size, "Safetensors file ", file, " is truncated: its header needs ", 8 + n,
               " bytes but the file has ", size, ".");
  json j;
  try {
    j = json::parse(reinterpret_cast<const char*>(data) + 8, reinterpret_cast<const char*>(data) + 8 + n);
  } catch (const json::parse_error& e) {
    throw Error(str("Safetensors file ", file, " has a header that is not valid JSON: ", e.what()));
  }
  DICE_REQUIRE(j.is_object(), "Safetensors file ", file, " has a header that is not a JSON object.");
  SafetensorsHeader h;
  h.data_begin_bytes = static_cast<int64_t>(8 + n);
  const int64_t data_bytes = static_cast<int64_t>(size - 8 - n);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      DICE_REQUIRE(e.is_object(), "Safetensors file ", file, ": \"__metadata__\" must be an object.");
      for (auto m = e.begin(); m != e.end(); ++m) {
        DICE_REQUIRE(m.value().is_string(), "Safetensors file ", file, ": metadata \"", m.key(), "\" must be a string.");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return Error(str("Safetensors file ", file, ", tensor \"", name, "\": ", why)); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw bad("the entry needs dtype, shape and data_offsets.");
    if (!e["dtype"].is_string()) throw bad("dtype must be a string.");
    TensorEntry t;
    t.name = name;
    t.dtype = e["dtype"].get<std::string>();
    const DtypeInfo* d = find_dtype(t.dtype);
    if (!d) throw bad(str("dtype \"", t.dtype, "\" is not supported (BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL)."));
    if (!e["shape"].is_array()) throw bad("shape must be a list of integers.");
    int64_t elems = 1;
    for (const auto& s : e["shape"]) {
      if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<int64_t>() >= 0))
        throw bad(str("shape ", e["shape"].dump(), " must hold non-negative integers."));
      int64_t dim = s.get<int64_t>();
      if (dim > 0 && elems > (int64_t(1) << 50) / dim) throw bad(str("shape ", e["shape"].dump(), " is implausibly large."));
      t.shape.push_back(dim);
      elems *= dim;
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad("data_offsets must be two non-negative integers.");
    t.begin_bytes = off[0].get<int64_t>();
    t.end_bytes = off[1].get<int64_t>();
    if (t.begin_bytes > t.end_bytes) throw bad(str("data_offsets [", t.begin_bytes, ", ", t.end_bytes, "] are reversed."));
    if (t.end_bytes > data_bytes)
      throw bad(str("data_offsets end at byte ", t.end_bytes, " but the data section has only ", data_bytes,
                    " bytes: the file is truncated or corrupt."));
    if (t.end_bytes - t.begin_bytes != elems * d->size_bytes)
      throw bad(str("shape ", e["shape"].dump(), " x ", d->size_bytes, " bytes (", elems * d->size_bytes,
                    ") does not match the ", t.end_bytes - t.begin_bytes, "-byte span in data_offsets."));
    h.tensors.push_back(std::move(t));
  }
  // Spans must not overlap (sorted by offset, each starts at or after the previous end).
  std::vector<const TensorEntry*> by_offset;
  for (const auto& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto a, auto b) { return a->begin_bytes < b->begin_bytes; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    DICE_REQUIRE(by_offset[i]->begin_bytes >= by_offset[i - 1]->end_bytes || by_offset[i]->begin_bytes == by_offset[i]->end_bytes,
                 "Safetensors file ", file, ": tensors \"", by_offset[i - 1]->name, "\" and \"", by_offset[i]->name,
                 "\" overlap in the data section: the file is corrupt.");
  }
  return h;
}

NamedTensors load_file(const std::string& file) {
  auto mapping = std::make_shared<Mapping>(file);
  SafetensorsHeader h = parse_header(file, mapping->data(), mapping->size());
  NamedTensors out;
  for (const auto& t : h.tensors) {
    const DtypeInfo* d = find_dtype(t.dtype);
    uint8_t* p = mapping->data() + h.data_begin_bytes + t.begin_bytes;
    auto opts = torch::TensorOptions().dtype(d->dtype);
    torch::Tensor x;
    if (t.end_bytes == t.begin_bytes) {
      x = torch::empty(t.shape, opts);
    } else if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(d->size_bytes) == 0) {
      // Zero-copy: the tensor keeps the (copy-on-write) mapping alive.
      auto keep = mapping;
      x = torch::from_blob(p, t.shape, [keep](void*) {}, opts);
    } else {
      // Misaligned span (allowed by the format): copy it.
      x = torch::empty(t.shape, opts);
      std::memcpy(x.data_ptr(), p, static_cast<size_t>(t.end_bytes - t.begin_bytes));
    }
    out.emplace(t.name, std::move(x));
  }
  return out;
}

NamedTensors load_index(const std::string& dir, const std::string& index_path) {
  json j;
  try {
    j = json::parse(fs::read_file(index_path));
  } catch (const json::parse_error& e) {
    throw Error(str("Safetensors index ", index_path, " is not valid JSON: ", e.what()));
  }
  DICE_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "Safetensors index ",
               index_path, " has no \"weight_map\" object.");
  std::map<std::string, std::set<std::string>> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    DICE_REQUIRE(it.value().is_string(), "Safetensors index ", index_path, ": the shard of \"", it.key(), "\" must be a file name.");
    const std::string shard = it.value().get<std::string>();
    DICE_REQUIRE(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), "Safetensors index ", index_path,
                 ": shard name \"", shard, "\" must be a plain file name in the same folder.");
    by_file[shard].insert(it.key());
  }
  NamedTensors out;
  for (const auto& [shard, names] : by_file) {
    const std::string path = dir + "/" + shard;
    DICE_REQUIRE(fs::exists(path), "Shard ", path, " listed in ", index_path, " is missing.");
    NamedTensors part = load_file(path);
    for (const auto& name : names) {
      auto it = part.find(name);
      DICE_REQUIRE(it != part.end(), "Safetensors index ", index_path, " puts \"", name, "\" in ", shard,
                   ", but that shard has no such tensor.");
      out[name] = it->second;
    }
    for (const auto& [name, t] : part) {
      DICE_REQUIRE(names.count(name), "Shard ", path, " holds \"", name, "\", which ", index_path,
                   " does not list: the index and shards do not match.");
    }
  }
  return out;
}

std::string encode_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                          std::vector<torch::Tensor>* contiguous) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DICE_REQUIRE(t.defined(), "Cannot save tensor \"", name, "\": it is undefined.");
    DICE_REQUIRE(name != "__metadata__" && !name.empty(), "Cannot save a tensor named \"", name, "\".");
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = c.numel() * static_cast<int64_t>(c.element_size());
    h[name] = {{"dtype", safetensors_dtype_name(c.scalar_type())},
               {"shape", c.sizes().vec()},
               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous->push_back(std::move(c));
  }
  std::string s = h.dump();
  // Pad with spaces so the data section starts 8-byte aligned (lets readers map without copying).
  while ((8 + s.size()) % 8 != 0) s.push_back(' ');
  return s;
}

}  // namespace

torch::Dtype safetensors_dtype(const std::string& name) {
  const DtypeInfo* d = find_dtype(name);
  DICE_REQUIRE(d, "Safetensors dtype \"", name, "\" is not supported.");
  return d->dtype;
}

std::string safetensors_dtype_name(torch::Dtype dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  throw Error(str("Tensors of dtype ", c10::toString(dtype), " cannot be stored in safetensors by dice."));
}

SafetensorsHeader read_safetensors_header(const std::string& file) {
  Mapping m(file);
  return parse_header(file, m.data(), m.size());
}

NamedTensors load_safetensors(const std::string& file_or_hf_dir) {
  std::error_code ec;
  if (stdfs::is_directory(file_or_hf_dir, ec)) {
    const std::string single = file_or_hf_dir + "/model.safetensors";
    const std::string index = file_or_hf_dir + "/model.safetensors.index.json";
    if (fs::exists(index)) return load_index(file_or_hf_dir, index);
    DICE_REQUIRE(fs::exists(single), "No model.safetensors or model.safetensors.index.json in ", file_or_hf_dir, ".");
    return load_file(single);
  }
  DICE_REQUIRE(fs::exists(file_or_hf_dir), "Safetensors file ", file_or_hf_dir, " does not exist.");
  return load_file(file_or_hf_dir);
}

void save_safetensors(const std::string& file, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> data;
  const std::string header = encode_header(tensors, metadata, &data);
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DICE_REQUIRE(out, "Cannot write ", tmp, ": ", std::strerror(errno), ".");
    uint8_t len[8];
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    DICE_REQUIRE(out, "Writing ", tmp, " failed (disk full?).");
  }
  DICE_REQUIRE(std::rename(tmp.c_str(), file.c_str()) == 0, "Cannot rename ", tmp, " to ", file, ": ",
               std::strerror(errno), ".");
}

void save_hf_weights(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes) {
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  DICE_REQUIRE(stdfs::is_directory(dir), "Cannot create the folder ", dir, ": ", ec.message(), ".");
  DICE_REQUIRE(max_shard_bytes >= 0, "max_shard_bytes must be >= 0, got ", max_shard_bytes, ".");
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (max_shard_bytes == 0) {
    save_safetensors(dir + "/model.safetensors", tensors, meta);
    std::remove((dir + "/model.safetensors.index.json").c_str());
    return;
  }
  // Greedy in name order: start a new shard when the next tensor would overflow this one.
  std::vector<NamedTensors> shards(1);
  int64_t used = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (used > 0 && used + bytes > max_shard_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back()[name] = t;
    used += bytes;
    total += bytes;
  }
  json weight_map = json::object();
  const size_t n = shards.size();
  for (size_t i = 0; i < n; ++i) {
    char fname[64];
    std::snprintf(fname, sizeof(fname), "model-%05zu-of-%05zu.safetensors", i + 1, n);
    save_safetensors(dir + "/" + fname, shards[i], meta);
    for (const auto& [name, t] : shards[i]) weight_map[name] = fname;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  fs::write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  std::remove((dir + "/model.safetensors").c_str());
}

}  // namespace dice::model
