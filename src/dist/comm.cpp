// Comm: the factory, the watchdog (deadline checks, the timeout path, the background thread) and
// the helpers built on Comm (gradient all-reduce, parameter broadcast, parameter checksum).
#include "dice/dist/comm.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "dice/util/hash.h"
#include "dice/util/log.h"
#include "watchdog.h"

namespace dice::dist {
namespace detail {

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

CommIdentity make_identity(MPI_Comm comm, const CommOptions& opts) {
  CommIdentity id;
  id.name = opts.name;
  id.role = opts.role;
  id.timeout_s = opts.timeout_s;
  DICE_CHECK_MPI(MPI_Comm_rank(comm, &id.rank));
  DICE_CHECK_MPI(MPI_Comm_size(comm, &id.size));
  return id;
}

std::string describe(const Call& call) {
  const CommIdentity& id = *call.comm;
  std::string what = std::string(call.op) == "send"   ? str("send to group rank ", call.peer)
                     : std::string(call.op) == "recv" ? str("recv from group rank ", call.peer)
                                                      : str("collective ", call.op);
  // The process's role is already in the message prefix; the comm's is named only when it differs.
  std::string role = !id.role.empty() && id.role != log::role() ? str(", as ", id.role) : "";
  return str(what, " on '", id.name, "' (group rank ", id.rank, " of ", id.size, role, ", ", call.bytes, " bytes)");
}

void Backoff::pause() {
  if (++polls_ < 1000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

namespace {

// The first watchdog report in the process wins; a second thread that times out meanwhile (the
// calling thread and the background thread can both see the same dead peer) waits to be killed.
std::atomic<bool>& reported() {
  static std::atomic<bool> r{false};
  return r;
}

[[noreturn]] void wait_to_be_killed() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

[[noreturn]] void report_timeout(const std::string& what, double timeout_s) {
  if (reported().exchange(true)) wait_to_be_killed();
  dice::fatal(what.c_str(), __FILE__, __LINE__,
              str("did not finish within ", timeout_s, " s: a rank is dead or stuck; aborting the job"));
}

[[noreturn]] void report_failure(const std::string& what, const std::string& why) {
  if (reported().exchange(true)) wait_to_be_killed();
  dice::fatal(what.c_str(), __FILE__, __LINE__, why);
}

}  // namespace

void timed_out(const Call& call) { report_timeout(describe(call), call.comm->timeout_s); }
void call_failed(const Call& call, const std::string& why) { report_failure(describe(call), why); }

void wait_mpi(std::vector<MPI_Request>& reqs, const Call& call, std::vector<MPI_Status>* statuses) {
  if (reqs.empty()) return;
  std::vector<MPI_Status> local;
  std::vector<MPI_Status>& st = statuses ? *statuses : local;
  st.resize(reqs.size());
  Deadline deadline(call.comm->timeout_s);
  Backoff backoff;
  for (;;) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, st.data());
    if (rc == MPI_ERR_IN_STATUS) {
      for (const auto& s : st)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) call_failed(call, mpi_error_text(s.MPI_ERROR));
    }
    if (rc != MPI_SUCCESS) call_failed(call, mpi_error_text(rc));
    if (done) return;
    if (deadline.expired()) timed_out(call);
    backoff.pause();
  }
}

void wait_mpi(MPI_Request& req, const Call& call) {
  std::vector<MPI_Request> reqs{req};
  wait_mpi(reqs, call);
  req = reqs[0];
}

Watchdog& Watchdog::instance() {
  static Watchdog w;
  return w;
}

Watchdog::Watchdog() : thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Calls still pending at exit are not released: the runtime that owns their handles (CUDA)
  // may already be gone.
}

void Watchdog::watch(Item item) {
  Deadline deadline(item.timeout_s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_[item.owner].push_back(Entry{std::move(item), deadline});
  }
  cv_.notify_all();
}

void Watchdog::forget(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(owner);
  if (it == calls_.end()) return;
  for (auto& e : it->second)
    if (e.item.release) e.item.release();
  calls_.erase(it);
}

size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [owner, q] : calls_) n += q.size();
  return n;
}

void Watchdog::run() {
  // A finished call is noticed within one tick; deadlines are seconds to minutes, so 10 ms is
  // both prompt and cheap.
  constexpr auto kTick = std::chrono::milliseconds(10);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (calls_.empty()) {
      cv_.wait(lock, [this] { return stop_ || !calls_.empty(); });
      continue;
    }
    std::string what, why;
    double timeout_s = 0;
    bool expired = false, failed = false;
    for (auto it = calls_.begin(); it != calls_.end() && !expired && !failed;) {
      auto& q = it->second;
      while (!q.empty()) {
        Entry& e = q.front();
        std::string error;
        Status s = e.item.poll(&error);
        if (s == Status::kDone) {
          if (e.item.release) e.item.release();
          q.pop_front();
          continue;
        }
        // The message is built under the lock: the owner may be destroyed once it is released.
        if (s == Status::kFailed) {
          failed = true;
          what = describe(e.item.call);
          why = error;
        } else if (e.deadline.expired()) {
          expired = true;
          what = describe(e.item.call);
          timeout_s = e.item.timeout_s;
        }
        break;
      }
      it = q.empty() ? calls_.erase(it) : std::next(it);
    }
    if (expired || failed) {
      lock.unlock();
      if (expired) report_timeout(what, timeout_s);
      report_failure(what, why);
    }
    cv_.wait_for(lock, kTick);
  }
}

OwnedMpiComm::OwnedMpiComm(MPI_Comm parent, const CommIdentity& id) {
  MPI_Request req = MPI_REQUEST_NULL;
  DICE_CHECK_MPI(MPI_Comm_idup(parent, &comm_, &req));
  wait_mpi(req, Call{&id, "comm_dup", 0});
  DICE_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

OwnedMpiComm::~OwnedMpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void check_tensor(const CommIdentity& id, const char* op, const torch::Tensor& t, torch::Device device) {
  DICE_REQUIRE(t.defined(), "Comm '", id.name, "': ", op, " got an undefined tensor");
  bool same = t.device().type() == device.type() && (!device.has_index() || t.device().index() == device.index());
  DICE_REQUIRE(same, "Comm '", id.name, "' works on ", device.str(), " but ", op, " got a tensor on ",
               t.device().str(), "; move it to the Comm's device first");
  DICE_REQUIRE(t.is_contiguous(), "Comm '", id.name, "': ", op,
               " needs a contiguous tensor (call .contiguous() on it first)");
}

void check_peer(const CommIdentity& id, const char* op, int peer) {
  DICE_REQUIRE(peer >= 0 && peer < id.size, "Comm '", id.name, "': ", op, " names group rank ", peer,
               " but the group has ", id.size, " ranks");
}

void check_other_rank(const CommIdentity& id, const char* op, int peer) {
  check_peer(id, op, peer);
  DICE_REQUIRE(peer != id.rank, "Comm '", id.name, "': ", op, " to or from this rank itself (group rank ", peer,
               ") is not supported");
}

}  // namespace detail

std::unique_ptr<Comm> make_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts) {
  // Every rank passes the same device type and force_mpi, so every rank picks the same backend.
  if (device.is_cpu()) device = torch::Device(torch::kCPU);
#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
  if (device.is_cuda() && !opts.force_mpi) return detail::make_nccl_comm(comm, device, opts);
#endif
  return detail::make_mpi_comm(comm, device, opts);
}

std::unique_ptr<Comm> self_comm(torch::Device device, const CommOptions& opts) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    });
  }
  return make_comm(MPI_COMM_SELF, device, opts);
}

bool have_nccl() {
#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

// ---- helpers ----

namespace {

// Consecutive parameters of one dtype whose elements go through one flat buffer.
struct Bucket {
  torch::ScalarType dtype;
  std::vector<size_t> index;
  int64_t numel = 0;
};

std::vector<Bucket> dtype_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto dtype = params[i].scalar_type();
    const int64_t n = params[i].numel();
    const int64_t elem_bytes = static_cast<int64_t>(c10::elementSize(dtype));
    bool fits = !buckets.empty() && buckets.back().dtype == dtype &&
                (buckets.back().numel == 0 || (buckets.back().numel + n) * elem_bytes <= bucket_bytes);
    if (!fits) buckets.push_back(Bucket{dtype, {}, 0});
    buckets.back().index.push_back(i);
    buckets.back().numel += n;
  }
  return buckets;
}

}  // namespace

void sum_over_ranks(Comm& comm, std::initializer_list<double*> values) {
  std::vector<double> v;
  for (double* x : values) v.push_back(*x);
  auto t = torch::tensor(v, torch::kFloat64).to(comm.device());
  comm.all_reduce(t);
  t = t.cpu();
  const double* out = t.data_ptr<double>();
  for (double* x : values) *x = *out++;
}

void all_reduce_gradients(Comm& comm, const std::vector<torch::Tensor>& params, double scale, int64_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  // Gradients have their parameter's dtype, so a missing gradient (zeros) has the same layout on
  // every rank and the buckets line up.
  for (const Bucket& b : dtype_buckets(params, bucket_bytes)) {
    auto flat = torch::empty({b.numel}, torch::TensorOptions().dtype(b.dtype).device(comm.device()));
    int64_t offset = 0;
    for (size_t i : b.index) {
      const auto& p = params[i];
      auto slot = flat.narrow(0, offset, p.numel());
      if (p.grad().defined()) {
        slot.copy_(p.grad().reshape({-1}));
      } else {
        slot.zero_();
      }
      offset += p.numel();
    }
    comm.all_reduce(flat, ReduceOp::kSum);
    if (scale != 1.0) flat.mul_(scale);
    offset = 0;
    for (size_t i : b.index) {
      const auto& p = params[i];
      auto sum = flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (!p.grad().defined()) p.mutable_grad() = torch::empty_like(p);
      p.mutable_grad().copy_(sum);
      offset += p.numel();
    }
  }
}

int64_t broadcast_parameters(Comm& comm, const std::vector<torch::Tensor>& params, int root, torch::Dtype wire_dtype,
                             int64_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  const bool is_root = comm.rank() == root;
  const int64_t elem_bytes = static_cast<int64_t>(c10::elementSize(wire_dtype));
  const int64_t bucket_elems = std::max<int64_t>(1, bucket_bytes / elem_bytes);
  int64_t total_elems = 0;
  for (const auto& p : params) total_elems += p.numel();
  if (total_elems == 0) return 0;

  // The parameters as one virtual flat sequence, cut into buckets (a large parameter spans
  // several). A non-contiguous parameter is received into a contiguous copy written back at the end.
  std::vector<torch::Tensor> flat(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (p.is_contiguous()) flat[i] = p.view({-1});
    else flat[i] = is_root ? p.reshape({-1}) : torch::empty({p.numel()}, p.options());
  }
  auto buffer = torch::empty({std::min(bucket_elems, total_elems)},
                             torch::TensorOptions().dtype(wire_dtype).device(comm.device()));

  size_t param = 0;        // first parameter of the bucket
  int64_t param_begin = 0; // its elements before this bucket
  for (int64_t begin = 0; begin < total_elems; begin += bucket_elems) {
    const int64_t n = std::min(bucket_elems, total_elems - begin);
    auto bucket = buffer.narrow(0, 0, n);
    // Walks the parameters that overlap [begin, begin + n): fn(parameter's flat slice, bucket slice).
    auto for_each_piece = [&](auto&& fn) {
      size_t i = param;
      int64_t skip = param_begin, filled = 0;
      while (filled < n) {
        const int64_t take = std::min(flat[i].numel() - skip, n - filled);
        if (take > 0) fn(flat[i].narrow(0, skip, take), bucket.narrow(0, filled, take));
        filled += take;
        skip += take;
        if (skip == flat[i].numel()) {
          ++i;
          skip = 0;
        }
      }
      param = i;
      param_begin = skip;
    };
    const size_t start_param = param;
    const int64_t start_begin = param_begin;
    if (is_root) for_each_piece([](const torch::Tensor& src, torch::Tensor dst) { dst.copy_(src); });
    comm.broadcast(bucket, root);
    if (!is_root) {
      param = start_param;
      param_begin = start_begin;
      for_each_piece([](torch::Tensor dst, const torch::Tensor& src) { dst.copy_(src); });
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].is_contiguous() && !is_root) params[i].copy_(flat[i].view(params[i].sizes()));
  return total_elems * elem_bytes;
}

std::string parameters_checksum(const std::vector<torch::Tensor>& params, torch::Dtype dtype) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& p : params) {
    auto bytes = p.detach().to(torch::kCPU).to(dtype).contiguous();
    // The element count goes in too, so the same bytes split differently give another checksum.
    const int64_t numel = bytes.numel();
    h = hash::fnv1a64(&numel, sizeof numel, h);
    h = hash::fnv1a64(bytes.data_ptr(), bytes.nbytes(), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace dice::dist
