// HDF5 error-stack capture and type helpers (see dice/ckpt/h5.h).
#include "dice/ckpt/h5.h"

#include <mutex>
#include <string>

namespace dice::ckpt::h5 {

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    // Failures become dice::Error sentences; HDF5 must not print its own stack to stderr.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace {
// Keeps the innermost cause (the first entry walking upward): the outer ones only restate it.
herr_t collect(unsigned n, const H5E_error2_t* e, void* out) {
  auto& s = *static_cast<std::string*>(out);
  if (s.empty() && e->desc && *e->desc) s = e->desc;
  return 0;
}
}  // namespace

std::string error_text() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &s);
  if (s.empty()) s = "no detail from HDF5";
  return s;
}

PropList file_access() {
  init();
  PropList fapl(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
  // Checkpoint files have one writer (inside step_N.tmp/) and no reader until committed, so HDF5's
  // flock() buys nothing — and fails on cluster file systems (Lustre, some NFS) that lack it.
  H5Pset_file_locking(fapl.get(), 0, 1);
#endif
  return fapl;
}

Datatype make_float16_type() {
  init();
  Datatype t(H5Tcopy(H5T_IEEE_F32LE));
  // sign at bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15 (IEEE 754 binary16).
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

}  // namespace dice::ckpt::h5
