#pragma once
// Dist internals shared by the Comm backends (private to src/dist and its tests):
//  - Call / CommIdentity: what is being waited on, for the one timeout message;
//  - Deadline, Backoff and timed_out(): the deadline check and the single path that ends the job;
//  - wait_mpi(): MPI requests polled in the calling thread (works with MPI_THREAD_FUNNELED);
//  - Watchdog: a background thread for calls that finish asynchronously (NCCL work on a CUDA
//    stream), which the calling thread does not wait for.
//  - OwnedMpiComm: the Comm's own duplicate of the caller's communicator (RAII).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dice/dist/comm.h"
#include "dice/util/error.h"

namespace dice::dist::detail {

std::string mpi_error_text(int code);
inline bool mpi_ok(int code) { return code == MPI_SUCCESS; }
#define DICE_CHECK_MPI(stmt) DICE_CHECK_GEN(stmt, ::dice::dist::detail::mpi_ok, ::dice::dist::detail::mpi_error_text)

// Who a Comm is, for messages.
struct CommIdentity {
  std::string name;        // CommOptions::name
  std::string role;        // CommOptions::role ("" when not given)
  int rank = 0, size = 1;  // within the group
  double timeout_s = 0;    // <= 0: no deadline
};
CommIdentity make_identity(MPI_Comm comm, const CommOptions& opts);

// One call being waited on. `op` is a string literal; `comm` outlives the call.
struct Call {
  const CommIdentity* comm = nullptr;
  const char* op = "";
  int64_t bytes = 0;
  int peer = -1;  // send/recv: the other group rank
};
// "collective all_reduce on 'learners' (group rank 1 of 4, 4096 bytes)"
std::string describe(const Call& call);

class Deadline {
 public:
  static constexpr double kMaxTimeout_s = 1e9;  // longer is "never" (and would overflow the clock)
  explicit Deadline(double timeout_s)
      : enabled_(timeout_s > 0),
        at_(std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(std::clamp(timeout_s, 0.0, kMaxTimeout_s)))) {}
  bool expired() const { return enabled_ && std::chrono::steady_clock::now() >= at_; }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point at_;
};

// Pause between two polls: yields first (a collective among ranks of one node finishes in
// microseconds), then sleeps briefly so a rank that waits minutes for its peers uses no core.
// The sleep stays short because MPI only makes progress inside the polls.
class Backoff {
 public:
  void pause();

 private:
  int polls_ = 0;
};

// Reports `call` as not finished within its comm's timeout_s through dice::fatal (one line naming
// rank, role, host, communicator, call and bytes; the abort hooks abort NCCL comms and MPI_Abort
// the job). Only the first caller in the process reports; a second one waits to be killed.
[[noreturn]] void timed_out(const Call& call);
// An NCCL / CUDA failure seen while waiting for `call`.
[[noreturn]] void call_failed(const Call& call, const std::string& why);

// Waits until every request is complete, polling in the calling thread; past the deadline,
// timed_out(call). `statuses` (optional) receives one status per request.
void wait_mpi(std::vector<MPI_Request>& reqs, const Call& call, std::vector<MPI_Status>* statuses = nullptr);
void wait_mpi(MPI_Request& req, const Call& call);

// The background half of the watchdog. A call handed over with watch() is polled by one thread
// until it reports done; one still pending past its deadline, or one that reports an error, ends
// the job (timed_out / call_failed). Calls of one owner are polled in the order they were
// handed over and the first pending one stops the scan: they complete in that order (one stream).
class Watchdog {
 public:
  enum class Status { kPending, kDone, kFailed };
  struct Item {
    const void* owner = nullptr;  // the Comm; forget(owner) drops its calls
    Call call;
    double timeout_s = 0;
    std::function<Status(std::string* error)> poll;  // called with the watchdog's lock held
    std::function<void()> release;                   // frees what poll uses; run once
  };

  static Watchdog& instance();
  void watch(Item item);
  // Releases `owner`'s calls without waiting for them (its destructor, before the handles that
  // poll uses go away).
  void forget(const void* owner);
  size_t pending() const;
  ~Watchdog();

 private:
  struct Entry {
    Item item;
    Deadline deadline;
  };
  Watchdog();
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<const void*, std::deque<Entry>> calls_;
  bool stop_ = false;
  std::thread thread_;
};

// The Comm's own duplicate of a communicator (MPI_Comm_idup, so a rank that never joins is
// caught by the deadline); errors are returned, not fatal inside MPI, so they get dice's report.
class OwnedMpiComm {
 public:
  OwnedMpiComm(MPI_Comm parent, const CommIdentity& id);
  ~OwnedMpiComm();
  OwnedMpiComm(const OwnedMpiComm&) = delete;
  OwnedMpiComm& operator=(const OwnedMpiComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The backends (make_comm picks one).
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts);
#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, torch::Device device, const CommOptions& opts);
#endif

// Throws dice::Error naming the comm and the call unless `t` is contiguous and on `device`.
void check_tensor(const CommIdentity& id, const char* op, const torch::Tensor& t, torch::Device device);
// Throws unless `peer` is a group rank (check_other_rank: and not this one).
void check_peer(const CommIdentity& id, const char* op, int peer);
void check_other_rank(const CommIdentity& id, const char* op, int peer);

}  // namespace dice::dist::detail
