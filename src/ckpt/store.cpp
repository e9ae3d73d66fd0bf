// Store: checksummed HDF5 datasets (see dice/ckpt/store.h).
//
// Data moves as raw little-endian bytes: each dataset is written and read with its own file type
// as the memory type, so HDF5 never converts and the SHA-256 covers exactly the stored bytes.
#include "dice/ckpt/store.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "dice/ckpt/h5.h"
#include "dice/util/error.h"
#include "dice/util/hash.h"

namespace dice::ckpt {

namespace {

constexpr const char* kShaAttr = "sha256";
constexpr const char* kDtypeAttr = "dtype";
constexpr const char* kVersionAttr = "dice_format_version";
constexpr const char* kKindAttr = "dice_kind";

struct DtypeEntry {
  torch::ScalarType type;
  const char* name;
};
const DtypeEntry kDtypes[] = {
    {torch::kFloat, "float32"}, {torch::kDouble, "float64"}, {torch::kHalf, "float16"},
    {torch::kBFloat16, "bfloat16"}, {torch::kLong, "int64"}, {torch::kInt, "int32"},
    {torch::kShort, "int16"}, {torch::kChar, "int8"}, {torch::kByte, "uint8"}, {torch::kBool, "bool"},
};

bool dtype_from_name(const std::string& name, torch::ScalarType* out) {
  for (const auto& e : kDtypes) {
    if (name == e.name) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

// The on-disk type of a tensor dtype (little-endian; bf16 as u16, bool as u8).
h5::Datatype file_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return h5::Datatype(H5Tcopy(H5T_IEEE_F32LE));
    case torch::kDouble: return h5::Datatype(H5Tcopy(H5T_IEEE_F64LE));
    case torch::kHalf: return h5::make_float16_type();
    case torch::kBFloat16: return h5::Datatype(H5Tcopy(H5T_STD_U16LE));
    case torch::kLong: return h5::Datatype(H5Tcopy(H5T_STD_I64LE));
    case torch::kInt: return h5::Datatype(H5Tcopy(H5T_STD_I32LE));
    case torch::kShort: return h5::Datatype(H5Tcopy(H5T_STD_I16LE));
    case torch::kChar: return h5::Datatype(H5Tcopy(H5T_STD_I8LE));
    case torch::kByte:
    case torch::kBool: return h5::Datatype(H5Tcopy(H5T_STD_U8LE));
    default: break;
  }
  throw Error(str("checkpoints cannot store tensors of dtype ", t));
}

// Dtype of a dataset without a dtype attribute (e.g. written by another tool).
bool dtype_from_h5(hid_t type, torch::ScalarType* out) {
  size_t size = H5Tget_size(type);
  H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) *out = torch::kFloat;
    else if (size == 8) *out = torch::kDouble;
    else if (size == 2) *out = torch::kHalf;
    else return false;
    return true;
  }
  if (cls == H5T_INTEGER) {
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (!is_signed) {
      if (size != 1) return false;
      *out = torch::kByte;
      return true;
    }
    if (size == 8) *out = torch::kLong;
    else if (size == 4) *out = torch::kInt;
    else if (size == 2) *out = torch::kShort;
    else if (size == 1) *out = torch::kChar;
    else return false;
    return true;
  }
  return false;
}

std::string sha256_of(const void* p, size_t n) {
  hash::Sha256 h;
  h.update(p, n);
  return h.hex_digest();
}

// Hashes buffers on worker threads while the caller keeps doing HDF5 I/O on its own thread;
// `done(digest)` runs on the caller's thread (HDF5 is not thread-safe), in push order.
class HashPipeline {
 public:
  using Done = std::function<void(const std::string&)>;
  HashPipeline() {
    unsigned hw = std::thread::hardware_concurrency();
    window_ = std::clamp<size_t>(hw == 0 ? 1 : hw, 1, 16);
  }
  ~HashPipeline() {
    for (auto& j : jobs_) if (j.f.valid()) j.f.wait();
  }
  // `keep` holds the buffer alive until hashed.
  void push(torch::Tensor keep, const void* p, size_t n, Done done) {
    Job j;
    j.done = std::move(done);
    if (n < (size_t{1} << 20)) {
      std::promise<std::string> pr;
      pr.set_value(sha256_of(p, n));
      j.f = pr.get_future();
    } else {
      j.f = std::async(std::launch::async, [keep, p, n] { return sha256_of(p, n); });
    }
    jobs_.push_back(std::move(j));
    drain(window_);
  }
  void drain(size_t keep_pending = 0) {
    while (jobs_.size() > keep_pending) {
      Job j = std::move(jobs_.front());
      jobs_.pop_front();
      j.done(j.f.get());
    }
  }

 private:
  struct Job {
    std::future<std::string> f;
    Done done;
  };
  std::deque<Job> jobs_;
  size_t window_ = 1;
};

void set_attr_string(hid_t obj, const char* key, const std::string& value) {
  h5::Datatype t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), std::max<size_t>(value.size(), 1));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  h5::Dataspace sp(H5Screate(H5S_SCALAR));
  h5::Attribute a(H5Acreate2(obj, key, t.get(), sp.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  if (!a || H5Awrite(a.get(), t.get(), buf.data()) < 0) throw Error(str("attribute '", key, "': ", h5::error_text()));
}

bool get_attr_string(hid_t obj, const char* key, std::string* out) {
  if (H5Aexists(obj, key) <= 0) return false;
  h5::Attribute a(H5Aopen(obj, key, H5P_DEFAULT));
  if (!a) return false;
  h5::Datatype t(H5Aget_type(a.get()));
  if (H5Tget_class(t.get()) != H5T_STRING || H5Tis_variable_str(t.get()) > 0) return false;
  std::string buf(H5Tget_size(t.get()), '\0');
  if (H5Aread(a.get(), t.get(), buf.data()) < 0) return false;
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  *out = buf;
  return true;
}

void set_attr_i64(hid_t obj, const char* key, int64_t v) {
  h5::Dataspace sp(H5Screate(H5S_SCALAR));
  h5::Attribute a(H5Acreate2(obj, key, H5T_STD_I64LE, sp.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), H5T_NATIVE_INT64, &v) < 0) throw Error(str("attribute '", key, "': ", h5::error_text()));
}

bool get_attr_i64(hid_t obj, const char* key, int64_t* out) {
  if (H5Aexists(obj, key) <= 0) return false;
  h5::Attribute a(H5Aopen(obj, key, H5P_DEFAULT));
  return a && H5Aread(a.get(), H5T_NATIVE_INT64, out) >= 0;
}

std::string join(const std::string& group, const std::string& name) {
  return group.empty() ? name : group + "/" + name;
}

}  // namespace

std::string dtype_name(torch::ScalarType t) {
  for (const auto& e : kDtypes) if (e.type == t) return e.name;
  return str(t);
}

struct Store::Impl {
  std::string path;
  h5::File file;

  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(str("checkpoint ", path, " is corrupt or truncated (HDF5 could not ", what, "): ", h5::error_text()));
  }
  [[noreturn]] void write_failed(const std::string& what) const {
    throw Error(str("could not write checkpoint file ", path, " (", what, "; is the disk full?): ", h5::error_text()));
  }
  void check_name(const std::string& name) const {
    DICE_REQUIRE(!name.empty() && name != "." && name.find('/') == std::string::npos, "cannot store '", name,
                 "' in checkpoint file ", path, ": dataset names must be non-empty and contain no '/'");
  }

  h5::Dataset open_dataset(const std::string& full) {
    h5::Dataset ds(H5Dopen2(file.get(), full.c_str(), H5P_DEFAULT));
    if (!ds) {
      if (!exists(full)) throw Error(str("checkpoint file ", path, " has no dataset '", full, "'"));
      corrupt(str("open dataset '", full, "'"));
    }
    return ds;
  }

  bool exists(const std::string& full) {
    size_t pos = 0;
    while (true) {
      size_t slash = full.find('/', pos);
      std::string prefix = full.substr(0, slash);
      if (H5Lexists(file.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
      if (slash == std::string::npos) return true;
      pos = slash + 1;
    }
  }

  // Creates `full` (intermediate groups too) and writes `bytes` raw; returns the open dataset.
  h5::Dataset write_raw(const std::string& full, hid_t type, const std::vector<hsize_t>& dims, bool scalar,
                        const void* bytes, size_t n_bytes) {
    h5::Dataspace sp(scalar ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    h5::PropList lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    h5::Dataset ds(H5Dcreate2(file.get(), full.c_str(), type, sp.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!sp || !ds) write_failed(str("create dataset '", full, "'"));
    if (n_bytes > 0 && H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) < 0)
      write_failed(str("write dataset '", full, "'"));
    return ds;
  }

  // Reads a dataset's raw bytes into `out` (resized to fit).
  void read_raw(const std::string& full, hid_t ds, std::string* out) {
    h5::Datatype t(H5Dget_type(ds));
    h5::Dataspace sp(H5Dget_space(ds));
    if (!t || !sp) corrupt(str("read dataset '", full, "'"));
    hssize_t n = H5Sget_simple_extent_npoints(sp.get());
    if (n < 0) corrupt(str("read dataset '", full, "'"));
    out->assign(static_cast<size_t>(n) * H5Tget_size(t.get()), '\0');
    if (!out->empty() && H5Dread(ds, t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data()) < 0)
      corrupt(str("read dataset '", full, "'"));
  }

  std::string stored_sha(const std::string& full, hid_t ds) {
    std::string sha;
    if (!get_attr_string(ds, kShaAttr, &sha))
      throw Error(str("checkpoint ", path, " is corrupt: dataset '", full, "' has no sha256 checksum attribute"));
    return sha;
  }

  std::string checksum_error(const std::string& full, const std::string& stored, const std::string& computed) {
    return str("checkpoint ", path, " is corrupt: dataset '", full, "' does not match its SHA-256 checksum (stored ",
               stored.substr(0, 12), "..., computed ", computed.substr(0, 12), "...)");
  }

  void verify_bytes(const std::string& full, hid_t ds, const std::string& bytes) {
    std::string stored = stored_sha(full, ds);
    std::string computed = sha256_of(bytes.data(), bytes.size());
    if (stored != computed) throw Error(checksum_error(full, stored, computed));
  }

  TensorInfo tensor_info(const std::string& full, hid_t ds) {
    TensorInfo info;
    info.name = full;
    h5::Datatype t(H5Dget_type(ds));
    h5::Dataspace sp(H5Dget_space(ds));
    if (!t || !sp) corrupt(str("read dataset '", full, "'"));
    std::string dname;
    bool ok = get_attr_string(ds, kDtypeAttr, &dname) ? dtype_from_name(dname, &info.dtype)
                                                              : dtype_from_h5(t.get(), &info.dtype);
    DICE_REQUIRE(ok, "checkpoint ", path, ": dataset '", full, "' has a type dice cannot load as a tensor",
                 dname.empty() ? "" : str(" (dtype '", dname, "')"));
    size_t elem = torch::elementSize(info.dtype);
    DICE_REQUIRE(H5Tget_size(t.get()) == elem, "checkpoint ", path, ": dataset '", full, "' stores ",
                 H5Tget_size(t.get()), "-byte elements, but its dtype ", dtype_name(info.dtype), " needs ", elem);
    int nd = H5Sget_simple_extent_ndims(sp.get());
    if (nd < 0) corrupt(str("read the shape of dataset '", full, "'"));
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    if (nd > 0) H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
    info.bytes = static_cast<int64_t>(elem);
    for (hsize_t d : dims) {
      info.shape.push_back(static_cast<int64_t>(d));
      info.bytes *= static_cast<int64_t>(d);
    }
    return info;
  }

  // Calls fn(full_name, dataset) for every dataset under `group` (recursively).
  void walk(const std::string& group, const std::function<void(const std::string&, hid_t)>& fn) {
    for (const auto& name : children(group)) {
      std::string full = join(group, name);
      h5::Object obj(H5Oopen(file.get(), full.c_str(), H5P_DEFAULT));
      if (!obj) corrupt(str("open object '", full, "'"));
      H5I_type_t type = H5Iget_type(obj.get());
      if (type == H5I_DATASET) fn(full, obj.get());
      else if (type == H5I_GROUP) walk(full, fn);
    }
  }

  std::vector<std::string> children(const std::string& group) {
    std::string g = group.empty() ? "/" : group;
    h5::Group gid(H5Gopen2(file.get(), g.c_str(), H5P_DEFAULT));
    if (!gid) {
      if (!group.empty() && !exists(group)) return {};
      corrupt(str("open group '", g, "'"));
    }
    H5G_info_t info;
    if (H5Gget_info(gid.get(), &info) < 0) corrupt(str("list group '", g, "'"));
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      ssize_t len = H5Lget_name_by_idx(gid.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) corrupt(str("list group '", g, "'"));
      std::string name(static_cast<size_t>(len) + 1, '\0');
      H5Lget_name_by_idx(gid.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
      name.resize(static_cast<size_t>(len));
      names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const std::string& Store::path() const { return impl_->path; }

Store Store::create(const std::string& path, const std::string& kind) {
  h5::init();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = h5::File(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, h5::file_access().get()));
  if (!impl->file) impl->write_failed("create the file");
  set_attr_i64(impl->file.get(), kVersionAttr, kFormatVersion);
  set_attr_string(impl->file.get(), kKindAttr, kind);
  return Store(std::move(impl));
}

int64_t Store::peek_format_version(const std::string& path) {
  h5::init();
  h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::file_access().get()));
  int64_t v = -1;
  if (f) get_attr_i64(f.get(), kVersionAttr, &v);
  return v;
}

Store Store::open(const std::string& path, const std::string& kind) {
  h5::init();
  DICE_REQUIRE(std::filesystem::is_regular_file(path), "checkpoint file ", path, " does not exist");
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = h5::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::file_access().get()));
  if (!impl->file) impl->corrupt("open the file");
  int64_t version = -1;
  DICE_REQUIRE(get_attr_i64(impl->file.get(), kVersionAttr, &version), "checkpoint file ", path,
               " is not a dice checkpoint file (its root has no ", kVersionAttr, " attribute)");
  DICE_REQUIRE(version == kFormatVersion, "checkpoint file ", path, " has checkpoint format version ", version,
               ", but this dice reads format version ", kFormatVersion,
               "; use the dice build that wrote it (e.g. to export-hf, then import-hf here)");
  std::string got;
  DICE_REQUIRE(get_attr_string(impl->file.get(), kKindAttr, &got) && got == kind, "checkpoint file ", path,
               " holds '", got, "' data where '", kind, "' data was expected");
  return Store(std::move(impl));
}

void Store::write_tensors(const std::string& group, const NamedTensors& tensors) {
  Impl& s = *impl_;
  if (!group.empty()) s.check_name(group);
  HashPipeline pipe;
  for (const auto& [name, t0] : tensors) {
    s.check_name(name);
    DICE_REQUIRE(t0.defined(), "cannot store undefined tensor '", name, "' in checkpoint file ", s.path);
    torch::Tensor t = t0.detach().to(torch::kCPU).contiguous();
    std::string full = join(group, name);
    h5::Datatype type = file_type(t.scalar_type());
    std::vector<hsize_t> dims;
    for (int64_t d : t.sizes()) dims.push_back(static_cast<hsize_t>(d));
    size_t n_bytes = t.numel() * t.element_size();
    const void* p = t.data_ptr();
    h5::Dataset ds = s.write_raw(full, type.get(), dims, t.dim() == 0, p, n_bytes);
    set_attr_string(ds.get(), kDtypeAttr, dtype_name(t.scalar_type()));
    // The checksum attribute is attached once the worker has hashed the bytes.
    pipe.push(t, p, n_bytes, [&s, full](const std::string& digest) {
      h5::Dataset d(H5Dopen2(s.file.get(), full.c_str(), H5P_DEFAULT));
      if (!d) s.write_failed(str("reopen dataset '", full, "'"));
      set_attr_string(d.get(), kShaAttr, digest);
    });
  }
  pipe.drain();
}

NamedTensors Store::read_tensors(const std::string& group, bool verify) {
  Impl& s = *impl_;
  NamedTensors out;
  HashPipeline pipe;
  s.walk(group, [&](const std::string& full, hid_t ds) {
    if (full.find('/', group.empty() ? 0 : group.size() + 1) != std::string::npos) return;  // subgroups
    TensorInfo info = s.tensor_info(full, ds);
    torch::Tensor t = torch::empty(info.shape, torch::TensorOptions().dtype(info.dtype));
    h5::Datatype type(H5Dget_type(ds));
    if (info.bytes > 0 && H5Dread(ds, type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
      s.corrupt(str("read dataset '", full, "'"));
    if (verify) {
      std::string stored = s.stored_sha(full, ds);
      pipe.push(t, t.data_ptr(), static_cast<size_t>(info.bytes), [&s, full, stored](const std::string& digest) {
        if (digest != stored) throw Error(s.checksum_error(full, stored, digest));
      });
    }
    out[group.empty() ? full : full.substr(group.size() + 1)] = t;
  });
  pipe.drain();
  return out;
}

std::vector<TensorInfo> Store::list_tensors(const std::string& group) {
  Impl& s = *impl_;
  std::vector<TensorInfo> out;
  for (const auto& name : s.children(group)) {
    std::string full = join(group, name);
    h5::Dataset ds = s.open_dataset(full);
    TensorInfo info = s.tensor_info(full, ds.get());
    info.name = name;
    out.push_back(std::move(info));
  }
  return out;
}

void Store::write_i64(const std::string& name, int64_t v) {
  h5::Dataset ds = impl_->write_raw(name, H5T_STD_I64LE, {}, true, &v, sizeof v);
  set_attr_string(ds.get(), kShaAttr, sha256_of(&v, sizeof v));
}

int64_t Store::read_i64(const std::string& name, bool verify) {
  h5::Dataset ds = impl_->open_dataset(name);
  std::string bytes;
  impl_->read_raw(name, ds.get(), &bytes);
  DICE_REQUIRE(bytes.size() == sizeof(int64_t), "checkpoint ", impl_->path, ": dataset '", name,
               "' is not a 64-bit integer");
  if (verify) impl_->verify_bytes(name, ds.get(), bytes);
  int64_t v;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

void Store::write_string(const std::string& name, const std::string& s) {
  h5::Datatype t(H5Tcopy(H5T_C_S1));
  std::string buf = s.empty() ? std::string(1, '\0') : s;
  H5Tset_size(t.get(), buf.size());
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  h5::Dataset ds = impl_->write_raw(name, t.get(), {}, true, buf.data(), buf.size());
  set_attr_string(ds.get(), kShaAttr, sha256_of(buf.data(), buf.size()));
}

std::string Store::read_string(const std::string& name, bool verify) {
  h5::Dataset ds = impl_->open_dataset(name);
  std::string bytes;
  impl_->read_raw(name, ds.get(), &bytes);
  if (verify) impl_->verify_bytes(name, ds.get(), bytes);
  while (!bytes.empty() && bytes.back() == '\0') bytes.pop_back();
  return bytes;
}

void Store::write_bytes(const std::string& name, const std::string& bytes) {
  std::vector<hsize_t> dims{bytes.size()};
  h5::Dataset ds = impl_->write_raw(name, H5T_STD_U8LE, dims, false, bytes.data(), bytes.size());
  set_attr_string(ds.get(), kShaAttr, sha256_of(bytes.data(), bytes.size()));
}

std::string Store::read_bytes(const std::string& name, bool verify) {
  h5::Dataset ds = impl_->open_dataset(name);
  std::string bytes;
  impl_->read_raw(name, ds.get(), &bytes);
  if (verify) impl_->verify_bytes(name, ds.get(), bytes);
  return bytes;
}

bool Store::has(const std::string& name) { return impl_->exists(name); }

std::vector<std::string> Store::list(const std::string& group) { return impl_->children(group); }

std::vector<std::string> Store::verify_all() {
  Impl& s = *impl_;
  std::vector<std::string> failures;
  HashPipeline pipe;
  try {
    s.walk("", [&](const std::string& full, hid_t ds) {
      try {
        h5::Datatype t(H5Dget_type(ds));
        h5::Dataspace sp(H5Dget_space(ds));
        hssize_t n = sp ? H5Sget_simple_extent_npoints(sp.get()) : -1;
        if (!t || n < 0) s.corrupt(str("read dataset '", full, "'"));
        int64_t n_bytes = n * static_cast<int64_t>(H5Tget_size(t.get()));
        torch::Tensor buf = torch::empty({n_bytes}, torch::kByte);
        if (n_bytes > 0 && H5Dread(ds, t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data_ptr()) < 0)
          s.corrupt(str("read dataset '", full, "'"));
        std::string stored = s.stored_sha(full, ds);
        pipe.push(buf, buf.data_ptr(), static_cast<size_t>(n_bytes), [&s, &failures, full, stored](const std::string& d) {
          if (d != stored) failures.push_back(s.checksum_error(full, stored, d));
        });
      } catch (const Error& e) {
        failures.push_back(e.what());
      }
    });
  } catch (const Error& e) {
    failures.push_back(e.what());
  }
  pipe.drain();
  return failures;
}

std::pair<int64_t, int64_t> Store::dataset_stats() {
  Impl& s = *impl_;
  int64_t count = 0, total = 0;
  s.walk("", [&](const std::string&, hid_t ds) {
    h5::Datatype t(H5Dget_type(ds));
    h5::Dataspace sp(H5Dget_space(ds));
    ++count;
    total += H5Sget_simple_extent_npoints(sp.get()) * static_cast<int64_t>(H5Tget_size(t.get()));
  });
  return {count, total};
}

void Store::close() {
  if (!impl_ || !impl_->file) return;
  if (H5Fflush(impl_->file.get(), H5F_SCOPE_LOCAL) < 0 || !impl_->file.close())
    impl_->write_failed("flush and close the file");
}

}  // namespace dice::ckpt
