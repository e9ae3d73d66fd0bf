#pragma once
// Comm: tensor collectives over a group of ranks, one interface with two backends (DESIGN §2).
//
//   auto comm = dist::make_comm(world.role_comm(), device, {"learners", "learner", world.timeout_s});
//   comm->all_reduce(grad_flat);                    // in place, sum
//   comm->broadcast(weights_bucket, /*root=*/0);    // in place
//
// Backends: NCCL when `device` is CUDA and the build has NCCL (the unique id is made on the
// group's rank 0 and broadcast over the MPI communicator); MPI otherwise (CPU tensors, also what
// CI uses to test every multi-rank path). Count and dtype come from the tensor; tensors must be
// contiguous and on the Comm's device. Supported dtypes: float32, float64, bfloat16, float16,
// int64, int32, uint8 (bf16 / fp16 sums on MPI are done in fp32 and written back).
//
// Watchdog: every call (collectives, send/recv, barrier) has a deadline of timeout_s. MPI calls
// are nonblocking requests polled against it in the calling thread; NCCL work, which finishes on
// the GPU after the call returns, is watched by a background thread. A call still running past
// its deadline prints one line naming the rank, role, host, communicator name, the call (and the
// peer of a send/recv) and its size in bytes, runs dice's abort hooks (NCCL comms aborted) and
// MPI_Aborts the job. timeout_s <= 0 disables it. World's control collectives do the same.
//
// All methods must be called by every rank of the group in the same order (send/recv: by the
// two peers). Ranks here are ranks within the group.
#include <mpi.h>
#include <torch/types.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace dice::dist {

enum class ReduceOp { kSum, kMax, kMin };

struct CommOptions {
  std::string name = "world";  // for messages: "learners", "actors", "weights", ...
  std::string role = "";       // this rank's role, for messages
  double timeout_s = 1800;     // watchdog deadline per call (<= 0: off)
  bool force_mpi = false;      // MPI backend even for CUDA tensors (tensors staged through the host)
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "nccl" | "mpi"
  virtual torch::Device device() const = 0;

  virtual void all_reduce(torch::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;  // in place
  virtual void broadcast(torch::Tensor& t, int root) = 0;                       // in place
  // Every rank's `t` (same shape on every rank), concatenated along a new leading dim: [size, ...].
  virtual torch::Tensor all_gather(const torch::Tensor& t) = 0;
  // t.numel() divisible by size(); rank r gets the reduction of chunk r (flat): [numel / size].
  virtual torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  virtual void send(const torch::Tensor& t, int peer) = 0;
  virtual void recv(torch::Tensor& t, int peer) = 0;  // into a tensor of the sender's shape/dtype
  virtual void barrier() = 0;
};

// NCCL for CUDA devices when built with NCCL (unless opts.force_mpi), else MPI. The MPI
// communicator is duplicated (the Comm owns its copy). Collective over `comm`.
std::unique_ptr<Comm> make_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts = {});

// A communicator of this process alone (MPI_COMM_SELF), for single-process tools and tests that
// drive learner code: initializes MPI first when nothing has (finalized at exit).
std::unique_ptr<Comm> self_comm(torch::Device device, const CommOptions& opts = {});

// True when this build has the NCCL backend.
bool have_nccl();

// ---- helpers built on Comm ----

// Sums the named doubles over the group in one all-reduce (fp64), in place: a step's metric sums,
// e.g. sum_over_ranks(comm, {&loss, &tokens}). Every rank passes the same list in the same order.
void sum_over_ranks(Comm& comm, std::initializer_list<double*> values);

// Sums the gradients of `params` over the group in flat buckets of about bucket_bytes (one
// all-reduce per bucket, in the gradients' dtype), then multiplies them by `scale`. Parameters
// without a gradient contribute zeros (every rank must pass the same list in the same order).
void all_reduce_gradients(Comm& comm, const std::vector<torch::Tensor>& params, double scale = 1.0,
                          int64_t bucket_bytes = 64ll << 20);

// Broadcasts `params` from `root` in flat buckets of `wire_dtype` (e.g. bf16): on root the buckets
// are filled from the parameters (cast), elsewhere received and copied into the parameters in
// place (cast to their dtype), so views and packed weights that alias them stay valid. Returns
// the bytes sent per rank.
int64_t broadcast_parameters(Comm& comm, const std::vector<torch::Tensor>& params, int root,
                             torch::Dtype wire_dtype, int64_t bucket_bytes = 64ll << 20);

// A 64-bit checksum (hex string) of the parameters' bytes after casting to `dtype` on the CPU, in
// list order: equal weights give equal strings.
std::string parameters_checksum(const std::vector<torch::Tensor>& params, torch::Dtype dtype);

}  // namespace dice::dist
