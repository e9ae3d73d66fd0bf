// NcclComm: the NCCL backend of Comm (CUDA tensors, one GPU per rank of the group). Compiled only
// in builds with NCCL (DICE_WITH_NCCL).
//
// Calls are enqueued on the current torch CUDA stream of the Comm's device and return before the
// GPU has finished them, as torch's own ops do: results are ready in stream order, and a tensor
// the caller drops meanwhile is safe because the caching allocator reuses memory in stream order.
// Each call's completion (a CUDA event) goes to the background Watchdog with its deadline. The
// communicator is nonblocking (config.blocking = 0): init, and calls that wait on the host for a
// peer (connection setup), return ncclInProgress and are polled against the deadline instead of
// hanging inside NCCL. barrier() alone waits on the host, for all work enqueued before it.
#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "dice/dist/comm.h"
#include "dice/util/log.h"
#include "watchdog.h"

namespace dice::dist::detail {
namespace {

bool cuda_ok(cudaError_t e) { return e == cudaSuccess; }
std::string cuda_text(cudaError_t e) { return cudaGetErrorString(e); }
#define DICE_CHECK_CUDA(stmt) DICE_CHECK_GEN(stmt, cuda_ok, cuda_text)

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return str("NCCL error ", static_cast<int>(r), " (", ncclGetErrorString(r), ")", last && *last ? ": " : "",
             last ? last : "");
}

// Datatypes NCCL reduces natively (bf16 and fp16 too); -1 for the others.
int nccl_reduce_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kInt64: return ncclInt64;
    case torch::kInt32: return ncclInt32;
    case torch::kUInt8: return ncclUint8;
    default: return -1;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// Live communicators, aborted by dice's abort hook (any fatal path, watchdog timeouts included) so
// that kernels waiting for a dead peer are released before MPI_Abort takes the job down.
struct LiveComms {
  std::mutex mu;
  std::vector<ncclComm_t> comms;
};
LiveComms& live() {
  static LiveComms l;
  return l;
}

void abort_live_comms() {
  auto& l = live();
  // The hook can run while another thread holds the lock for a moment: try for a while, then
  // abort without it (the process is going down either way).
  std::unique_lock<std::mutex> lock(l.mu, std::defer_lock);
  for (int i = 0; i < 100 && !lock.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (ncclComm_t c : l.comms) ncclCommAbort(c);
  l.comms.clear();
}

void add_live(ncclComm_t c) {
  static std::once_flag hook;
  // Registered after World's MPI_Abort hook, so it runs before it (hooks run most recent first).
  std::call_once(hook, [] { add_abort_hook(abort_live_comms); });
  std::lock_guard<std::mutex> lock(live().mu);
  live().comms.push_back(c);
}

// False when the abort hook already took (and aborted) it.
bool remove_live(ncclComm_t c) {
  std::lock_guard<std::mutex> lock(live().mu);
  auto& v = live().comms;
  auto it = std::find(v.begin(), v.end(), c);
  if (it == v.end()) return false;
  v.erase(it);
  return true;
}

// The watchdog's view of one enqueued call: an async NCCL error, or its event done.
Watchdog::Status poll_call(ncclComm_t comm, cudaEvent_t done, std::string* error) {
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  if (async != ncclSuccess && async != ncclInProgress) {
    *error = nccl_text(async, comm);
    return Watchdog::Status::kFailed;
  }
  cudaError_t e = cudaEventQuery(done);
  if (e == cudaSuccess) return Watchdog::Status::kDone;
  if (e == cudaErrorNotReady) return Watchdog::Status::kPending;
  *error = str("CUDA error while waiting for it: ", cudaGetErrorString(e));
  return Watchdog::Status::kFailed;
}

}  // namespace

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm parent, torch::Device device, const CommOptions& opts)
      : id_(make_identity(parent, opts)),
        device_(torch::kCUDA, device.has_index() ? device.index() : c10::cuda::current_device()) {
    c10::cuda::CUDAGuard guard(device_.index());
    ncclUniqueId uid{};
    const Call init{&id_, "nccl_init", 0};
    if (id_.rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&uid);
      if (r != ncclSuccess) call_failed(init, nccl_text(r, nullptr));
    }
    {
      // The MPI side is needed only to hand out the unique id; the duplicate keeps that broadcast
      // apart from the caller's own traffic on `parent`.
      OwnedMpiComm mpi(parent, id_);
      MPI_Request req = MPI_REQUEST_NULL;
      DICE_CHECK_MPI(MPI_Ibcast(&uid, sizeof uid, MPI_BYTE, 0, mpi.get(), &req));
      wait_mpi(req, Call{&id_, "nccl_unique_id", static_cast<int64_t>(sizeof uid)});
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    config.commName = id_.name.c_str();  // in NCCL's own logs
#endif
    settle(init, ncclCommInitRankConfig(&comm_, id_.size, uid, id_.rank, &config));
    add_live(comm_);
  }

  ~NcclComm() override {
    Watchdog::instance().forget(this);
    if (!remove_live(comm_)) return;  // aborted by the abort hook
    c10::cuda::CUDAGuard guard(device_.index());
    // Finalize flushes outstanding work and waits for the peers; a destructor must not hang on a
    // dead one, so past the deadline the communicator is aborted instead.
    ncclResult_t state = ncclCommFinalize(comm_);
    Deadline deadline(id_.timeout_s);
    Backoff backoff;
    while (state == ncclInProgress && !deadline.expired()) {
      backoff.pause();
      ncclCommGetAsyncError(comm_, &state);
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      log::warn("NCCL communicator '", id_.name, "' did not shut down within ", id_.timeout_s, " s (",
                state == ncclInProgress ? std::string("peers not finished") : nccl_text(state, comm_),
                "); aborting it");
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return id_.rank; }
  int size() const override { return id_.size; }
  const char* backend() const override { return "nccl"; }
  torch::Device device() const override { return device_; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    check_tensor(id_, "all_reduce", t, device_);
    const auto type = reduction_type(t, "all_reduce");
    enqueue(Call{&id_, "all_reduce", static_cast<int64_t>(t.nbytes())}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, nccl_op(op), comm_, s);
    });
  }

  void broadcast(torch::Tensor& t, int root) override {
    check_tensor(id_, "broadcast", t, device_);
    check_peer(id_, "broadcast", root);
    enqueue(Call{&id_, "broadcast", static_cast<int64_t>(t.nbytes())}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, s);
    });
  }

  torch::Tensor all_gather(const torch::Tensor& t) override {
    check_tensor(id_, "all_gather", t, device_);
    std::vector<int64_t> shape{id_.size};
    shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
    auto out = torch::empty(shape, t.options());
    enqueue(Call{&id_, "all_gather", static_cast<int64_t>(t.nbytes())}, [&](cudaStream_t s) {
      return ncclAllGather(t.data_ptr(), out.data_ptr(), t.nbytes(), ncclUint8, comm_, s);
    });
    return out;
  }

  torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op) override {
    check_tensor(id_, "reduce_scatter", t, device_);
    DICE_REQUIRE(t.numel() % id_.size == 0, "Comm '", id_.name, "': reduce_scatter needs numel divisible by the ",
                 id_.size, " ranks (got ", t.numel(), ")");
    const auto type = reduction_type(t, "reduce_scatter");
    auto out = torch::empty({t.numel() / id_.size}, t.options());
    enqueue(Call{&id_, "reduce_scatter", static_cast<int64_t>(t.nbytes())}, [&](cudaStream_t s) {
      return ncclReduceScatter(t.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), type, nccl_op(op),
                               comm_, s);
    });
    return out;
  }

  void send(const torch::Tensor& t, int peer) override {
    check_tensor(id_, "send", t, device_);
    check_other_rank(id_, "send", peer);
    enqueue(Call{&id_, "send", static_cast<int64_t>(t.nbytes()), peer}, [&](cudaStream_t s) {
      return ncclSend(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm_, s);
    });
  }

  void recv(torch::Tensor& t, int peer) override {
    check_tensor(id_, "recv", t, device_);
    check_other_rank(id_, "recv", peer);
    enqueue(Call{&id_, "recv", static_cast<int64_t>(t.nbytes()), peer}, [&](cudaStream_t s) {
      return ncclRecv(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm_, s);
    });
  }

  void barrier() override {
    const Call call{&id_, "barrier", 0};
    c10::cuda::CUDAGuard guard(device_.index());
    if (!barrier_buf_.defined()) barrier_buf_ = torch::zeros({1}, torch::TensorOptions().device(device_));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    settle(call, ncclAllReduce(barrier_buf_.data_ptr(), barrier_buf_.data_ptr(), 1, ncclFloat32, ncclSum, comm_, stream));
    // Waits on the host, polled against the deadline (a plain stream sync could hang forever).
    cudaEvent_t done = nullptr;
    DICE_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    DICE_CHECK_CUDA(cudaEventRecord(done, stream));
    Deadline deadline(id_.timeout_s);
    Backoff backoff;
    for (;;) {
      std::string error;
      auto status = poll_call(comm_, done, &error);
      if (status == Watchdog::Status::kDone) break;
      if (status == Watchdog::Status::kFailed) call_failed(call, error);
      if (deadline.expired()) timed_out(call);
      backoff.pause();
    }
    cudaEventDestroy(done);
  }

 private:
  // Completes a call's host side: ncclInProgress (nonblocking communicator) is polled until the
  // communicator is ready again, against the deadline.
  void settle(const Call& call, ncclResult_t r) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) call_failed(call, nccl_text(r, comm_));
    Deadline deadline(id_.timeout_s);
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) call_failed(call, nccl_text(state, comm_));
      if (deadline.expired()) timed_out(call);
      backoff.pause();
    }
  }

  // Enqueues `nccl(stream)` on the current stream and hands its completion to the watchdog.
  template <typename Enqueue>
  void enqueue(const Call& call, Enqueue&& nccl) {
    c10::cuda::CUDAGuard guard(device_.index());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    settle(call, nccl(stream));
    if (id_.timeout_s <= 0) return;
    cudaEvent_t done = nullptr;
    DICE_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    DICE_CHECK_CUDA(cudaEventRecord(done, stream));
    Watchdog::Item item;
    item.owner = this;
    item.call = call;
    item.timeout_s = id_.timeout_s;
    item.poll = [comm = comm_, done](std::string* error) { return poll_call(comm, done, error); };
    item.release = [done] { cudaEventDestroy(done); };
    Watchdog::instance().watch(std::move(item));
  }

  ncclDataType_t reduction_type(const torch::Tensor& t, const char* op) const {
    const int type = nccl_reduce_type(t.scalar_type());
    DICE_REQUIRE(type >= 0, "Comm '", id_.name, "': ", op, " does not support dtype ", t.scalar_type(),
                 " (supported: float32, float64, bfloat16, float16, int64, int32, uint8)");
    return static_cast<ncclDataType_t>(type);
  }

  CommIdentity id_;
  torch::Device device_;
  ncclComm_t comm_ = nullptr;
  torch::Tensor barrier_buf_;
};

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts) {
  return std::make_unique<NcclComm>(comm, device, opts);
}

}  // namespace dice::dist::detail

#endif  // DICE_WITH_NCCL
