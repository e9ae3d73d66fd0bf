// MpiComm: the MPI backend of Comm. CPU tensors; CUDA tensors (force_mpi, or a build without
// NCCL) are staged through host memory. Every call posts nonblocking MPI operations on the Comm's
// own communicator and polls them in the calling thread against the deadline (wait_mpi): no
// thread of its own, so it works with the MPI_THREAD_FUNNELED that World asks for.
#include <torch/torch.h>

#include <algorithm>
#include <climits>

#include "dice/dist/comm.h"
#include "watchdog.h"

namespace dice::dist::detail {
namespace {

// MPI counts are int: larger buffers go as several operations of at most this many elements.
constexpr int64_t kMaxCount = int64_t{1} << 30;
constexpr int kTag = 0;  // send/recv: one stream of messages per pair, matched in order

MPI_Datatype reduce_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

// MPI has no bf16/fp16 arithmetic: those are reduced in fp32.
bool reduced_in_fp32(torch::ScalarType t) { return t == torch::kBFloat16 || t == torch::kFloat16; }

}  // namespace

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm parent, torch::Device device, const CommOptions& opts)
      : id_(make_identity(parent, opts)), comm_(parent, id_), device_(device) {}

  int rank() const override { return id_.rank; }
  int size() const override { return id_.size; }
  const char* backend() const override { return "mpi"; }
  torch::Device device() const override { return device_; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    check_tensor(id_, "all_reduce", t, device_);
    const Call call{&id_, "all_reduce", static_cast<int64_t>(t.nbytes())};
    auto host = to_host(t);
    auto work = reduction_buffer(host, "all_reduce");
    std::vector<MPI_Request> reqs;
    char* base = static_cast<char*>(work.data_ptr());
    for (int64_t offset = 0; offset < work.numel(); offset += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, work.numel() - offset));
      reqs.emplace_back();
      DICE_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, base + offset * work.element_size(), n,
                                    reduce_type(work.scalar_type()), mpi_op(op), comm_.get(), &reqs.back()));
    }
    wait_mpi(reqs, call);
    if (!work.is_same(host)) host.copy_(work);
    if (!t.is_cpu()) t.copy_(host);
  }

  void broadcast(torch::Tensor& t, int root) override {
    check_tensor(id_, "broadcast", t, device_);
    check_peer(id_, "broadcast", root);
    const Call call{&id_, "broadcast", static_cast<int64_t>(t.nbytes())};
    auto host = to_host(t);
    std::vector<MPI_Request> reqs;
    post_bytes(host, &reqs, [&](char* p, int n, MPI_Request* r) {
      return MPI_Ibcast(p, n, MPI_BYTE, root, comm_.get(), r);
    });
    wait_mpi(reqs, call);
    if (!t.is_cpu() && id_.rank != root) t.copy_(host);
  }

  torch::Tensor all_gather(const torch::Tensor& t) override {
    check_tensor(id_, "all_gather", t, device_);
    const Call call{&id_, "all_gather", static_cast<int64_t>(t.nbytes())};
    DICE_REQUIRE(t.nbytes() <= static_cast<size_t>(INT_MAX), "Comm '", id_.name,
                 "': all_gather on the MPI backend takes at most 2 GiB per rank (got ", t.nbytes(), " bytes)");
    auto host = to_host(t);
    std::vector<int64_t> shape{id_.size};
    shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
    auto out = torch::empty(shape, host.options());
    const int n = static_cast<int>(t.nbytes());
    MPI_Request req = MPI_REQUEST_NULL;
    DICE_CHECK_MPI(MPI_Iallgather(host.data_ptr(), n, MPI_BYTE, out.data_ptr(), n, MPI_BYTE, comm_.get(), &req));
    wait_mpi(req, call);
    return t.is_cpu() ? out : out.to(t.device());
  }

  torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op) override {
    check_tensor(id_, "reduce_scatter", t, device_);
    DICE_REQUIRE(t.numel() % id_.size == 0, "Comm '", id_.name, "': reduce_scatter needs numel divisible by the ",
                 id_.size, " ranks (got ", t.numel(), ")");
    const Call call{&id_, "reduce_scatter", static_cast<int64_t>(t.nbytes())};
    const int64_t chunk = t.numel() / id_.size;
    DICE_REQUIRE(chunk <= INT_MAX, "Comm '", id_.name, "': reduce_scatter on the MPI backend takes at most ", INT_MAX,
                 " elements per rank (got ", chunk, ")");
    auto host = to_host(t);
    auto work = reduction_buffer(host, "reduce_scatter");
    auto out = torch::empty({chunk}, work.options());
    MPI_Request req = MPI_REQUEST_NULL;
    DICE_CHECK_MPI(MPI_Ireduce_scatter_block(work.data_ptr(), out.data_ptr(), static_cast<int>(chunk),
                                             reduce_type(work.scalar_type()), mpi_op(op), comm_.get(), &req));
    wait_mpi(req, call);
    if (out.scalar_type() != t.scalar_type()) out = out.to(t.scalar_type());
    return t.is_cpu() ? out : out.to(t.device());
  }

  // Returns once `t` may be reused (as MPI_Send), whether or not the peer has received it yet.
  void send(const torch::Tensor& t, int peer) override {
    check_tensor(id_, "send", t, device_);
    check_other_rank(id_, "send", peer);
    const Call call{&id_, "send", static_cast<int64_t>(t.nbytes()), peer};
    auto host = to_host(t);
    std::vector<MPI_Request> reqs;
    post_bytes(host, &reqs, [&](char* p, int n, MPI_Request* r) {
      return MPI_Isend(p, n, MPI_BYTE, peer, kTag, comm_.get(), r);
    });
    wait_mpi(reqs, call);
  }

  void recv(torch::Tensor& t, int peer) override {
    check_tensor(id_, "recv", t, device_);
    check_other_rank(id_, "recv", peer);
    const Call call{&id_, "recv", static_cast<int64_t>(t.nbytes()), peer};
    auto host = t.is_cpu() ? t : torch::empty(t.sizes(), t.options().device(torch::kCPU));
    std::vector<MPI_Request> reqs;
    std::vector<int> expect_bytes;
    post_bytes(host, &reqs, [&](char* p, int n, MPI_Request* r) {
      expect_bytes.push_back(n);
      return MPI_Irecv(p, n, MPI_BYTE, peer, kTag, comm_.get(), r);
    });
    std::vector<MPI_Status> statuses;
    wait_mpi(reqs, call, &statuses);
    for (size_t i = 0; i < statuses.size(); ++i) {
      int got = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &got);
      DICE_REQUIRE(got == expect_bytes[i], "Comm '", id_.name, "': recv from group rank ", peer, " got ", got,
                   " bytes where the tensor holds ", expect_bytes[i],
                   ": the sender's tensor has another shape or dtype");
    }
    if (!t.is_cpu()) t.copy_(host);
  }

  void barrier() override {
    const Call call{&id_, "barrier", 0};
    MPI_Request req = MPI_REQUEST_NULL;
    DICE_CHECK_MPI(MPI_Ibarrier(comm_.get(), &req));
    wait_mpi(req, call);
  }

 private:
  static torch::Tensor to_host(const torch::Tensor& t) { return t.is_cpu() ? t : t.to(torch::kCPU); }

  // The buffer MPI reduces: `host` itself, or its fp32 copy for bf16/fp16.
  torch::Tensor reduction_buffer(const torch::Tensor& host, const char* op) const {
    const auto dtype = host.scalar_type();
    if (reduced_in_fp32(dtype)) return host.to(torch::kFloat32);
    DICE_REQUIRE(reduce_type(dtype) != MPI_DATATYPE_NULL, "Comm '", id_.name, "': ", op, " does not support dtype ",
                 dtype, " (supported: float32, float64, bfloat16, float16, int64, int32, uint8)");
    return host;
  }

  // Posts `post(ptr, n_bytes, &request)` over `host`'s bytes in pieces MPI's int counts can hold.
  template <typename Post>
  void post_bytes(const torch::Tensor& host, std::vector<MPI_Request>* reqs, Post&& post) const {
    char* base = static_cast<char*>(host.data_ptr());
    const int64_t total = static_cast<int64_t>(host.nbytes());
    int64_t offset = 0;
    do {  // an empty tensor still posts one (empty) message, so both sides match
      const int n = static_cast<int>(std::min(kMaxCount, total - offset));
      reqs->emplace_back();
      DICE_CHECK_MPI(post(base + offset, n, &reqs->back()));
      offset += n;
    } while (offset < total);
  }

  CommIdentity id_;
  OwnedMpiComm comm_;
  torch::Device device_;
};

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts) {
  return std::make_unique<MpiComm>(comm, device, opts);
}

}  // namespace dice::dist::detail
