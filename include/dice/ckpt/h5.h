#pragma once
// Thin RAII layer over the HDF5 C API (1.10): one owning wrapper per kind of hid_t, and the
// error-stack capture that turns HDF5 failures into dice::Error sentences.
//
// Contract:
//  - h5::init() silences HDF5's automatic error printing (idempotent; every helper calls it).
//  - Id<Close> owns one identifier and closes it with the matching H5*close; move-only.
//  - h5::error_text() returns the current HDF5 error stack as one line (innermost cause last),
//    for the message of the dice::Error the caller throws.
#include <hdf5.h>

#include <string>
#include <utility>

namespace dice::ckpt::h5 {

void init();
std::string error_text();

template <herr_t (*Close)(hid_t)>
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Id() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  explicit operator bool() const { return valid(); }
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }
  // Closes now and reports whether HDF5 accepted it (a file close flushes: failures matter).
  bool close() {
    if (id_ < 0) return true;
    herr_t rc = Close(std::exchange(id_, H5I_INVALID_HID));
    return rc >= 0;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Id<H5Fclose>;
using Group = Id<H5Gclose>;
using Dataset = Id<H5Dclose>;
using Dataspace = Id<H5Sclose>;
using Datatype = Id<H5Tclose>;
using Attribute = Id<H5Aclose>;
using PropList = Id<H5Pclose>;
using Object = Id<H5Oclose>;  // any object opened with H5Oopen

// File-access properties for checkpoint files: file locking off where HDF5 allows it.
PropList file_access();

// An IEEE half-precision type (HDF5 1.10 has no predefined one). Owned copy.
Datatype make_float16_type();

}  // namespace dice::ckpt::h5
