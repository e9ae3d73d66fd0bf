// dist::Comm under mpirun -np 3: every collective on small-integer values (exact in every dtype,
// so results are compared with equality), the helpers (gradient all-reduce against the hand sum,
// in-place parameter broadcast over a bf16 wire, checksums), the background watchdog, and the
// watchdog ending whole jobs (mpirun started from the test, a rank that never joins). With CUDA
// and NCCL, the same collectives run over NCCL too.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "dice/dist/comm.h"
#include "dice/dist/world.h"
#include "dice/util/subprocess.h"
#include "watchdog.h"

#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
#include <ATen/cuda/Sleep.h>
#endif

namespace dice::dist {
namespace {

std::unique_ptr<Comm> cpu_comm(const std::string& name = "test") {
  return make_comm(MPI_COMM_WORLD, torch::kCPU, CommOptions{name, "", 60.0});
}

#define EXPECT_TENSOR_EQ(a, b) EXPECT_TRUE(torch::equal((a), (b))) << "got\n" << (a) << "\nexpected\n" << (b)

// rank r holds (i + 1) * (r + 1) at position i; the sum over ranks is (i + 1) * size * (size + 1) / 2.
torch::Tensor ramp(int64_t n, int rank, torch::Dtype dtype) {
  return (torch::arange(1, n + 1, torch::kFloat64) * (rank + 1)).to(dtype);
}

// The collectives on `comm`, whose device is `device`: used for both backends.
void check_collectives(Comm& comm, torch::Device device) {
  const int r = comm.rank(), n = comm.size();
  const auto on = [&](torch::Tensor t) { return t.to(device); };
  const double tri = n * (n + 1) / 2.0;

  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16, torch::kInt64,
                     torch::kInt32, torch::kUInt8}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto t = on(ramp(7, r, dtype));
    comm.all_reduce(t);
    EXPECT_TENSOR_EQ(t.cpu(), (torch::arange(1, 8, torch::kFloat64) * tri).to(dtype));

    auto mx = on(ramp(7, r, dtype));
    comm.all_reduce(mx, ReduceOp::kMax);
    EXPECT_TENSOR_EQ(mx.cpu(), ramp(7, n - 1, dtype));
    auto mn = on(ramp(7, r, dtype));
    comm.all_reduce(mn, ReduceOp::kMin);
    EXPECT_TENSOR_EQ(mn.cpu(), ramp(7, 0, dtype));

    // rank q holds base * (q + 1), whose chunk c is row c of base; rank r gets row r * n(n+1)/2.
    auto base = torch::arange(n * 3, torch::kFloat64).reshape({n, 3}) + torch::arange(n).view({n, 1}) * 7;
    auto rs = comm.reduce_scatter(on((base * (r + 1)).reshape(-1).to(dtype)));
    EXPECT_EQ(rs.scalar_type(), dtype);
    EXPECT_TENSOR_EQ(rs.cpu(), (base[r] * tri).to(dtype));
  }

  // int64 beyond 2^53: a sum through double would round.
  auto big = on(torch::full({3}, (int64_t{1} << 60) + r, torch::kInt64));
  comm.all_reduce(big);
  EXPECT_TENSOR_EQ(big.cpu(), torch::full({3}, n * (int64_t{1} << 60) + n * (n - 1) / 2, torch::kInt64));

  const int root = n - 1;
  auto b = on(r == root ? torch::arange(12, torch::kFloat32).reshape({3, 4}) : torch::full({3, 4}, -1.0f));
  comm.broadcast(b, root);
  EXPECT_TENSOR_EQ(b.cpu(), torch::arange(12, torch::kFloat32).reshape({3, 4}));
  auto bb = on(r == 0 ? torch::arange(5, torch::kBFloat16) : torch::zeros({5}, torch::kBFloat16));
  comm.broadcast(bb, 0);
  EXPECT_TENSOR_EQ(bb.cpu(), torch::arange(5, torch::kBFloat16));

  auto mine = on(torch::arange(6, torch::kInt32).reshape({2, 3}) + 100 * r);
  auto all = comm.all_gather(mine);
  ASSERT_EQ(all.sizes(), (std::vector<int64_t>{n, 2, 3}));
  for (int k = 0; k < n; ++k) EXPECT_TENSOR_EQ(all[k].cpu(), torch::arange(6, torch::kInt32).reshape({2, 3}) + 100 * k);

  // A ring: rank 0 sends first and everyone else receives first, so no two ranks wait on each
  // other. The large message goes through MPI's rendezvous path.
  if (n > 1) {
    for (int64_t numel : {int64_t{5}, int64_t{1} << 20}) {
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      auto out = on(torch::full({numel}, static_cast<float>(r + 1)));
      auto in = on(torch::zeros({numel}));
      if (r == 0) {
        comm.send(out, next);
        comm.recv(in, prev);
      } else {
        comm.recv(in, prev);
        comm.send(out, next);
      }
      EXPECT_TENSOR_EQ(in.cpu(), torch::full({numel}, static_cast<float>(prev + 1)));
    }
  }
  comm.barrier();
}

TEST(CommMpi, Collectives) {
  auto comm = cpu_comm();
  EXPECT_STREQ(comm->backend(), "mpi");
  EXPECT_TRUE(comm->device().is_cpu());
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(comm->rank(), world_rank);
  EXPECT_EQ(comm->size(), world_size);
  check_collectives(*comm, torch::kCPU);
}

TEST(CommMpi, SubgroupOwnsItsCommunicator) {
  // Two groups (even / odd world ranks) each with a Comm; the caller's communicator is freed
  // right away, the Comm keeps working on its duplicate.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  auto comm = make_comm(half, torch::kCPU, CommOptions{"half", "", 60.0});
  MPI_Comm_free(&half);
  auto t = torch::full({4}, static_cast<double>(world_rank));
  comm->all_reduce(t);
  double expect = 0;
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  for (int w = world_rank % 2; w < world_size; w += 2) expect += w;
  EXPECT_TENSOR_EQ(t, torch::full({4}, expect));
}

TEST(CommMpi, RejectsWhatItCannotDo) {
  // The checks run before any communication, so every rank throws and none is left waiting.
  auto comm = cpu_comm();
  auto strided = torch::zeros({4, 4}).t();
  EXPECT_THROW(comm->all_reduce(strided), Error);
  auto flags = torch::zeros({3}, torch::kBool);
  EXPECT_THROW(comm->all_reduce(flags), Error);
  if (comm->size() > 1) {
    auto odd = torch::zeros({comm->size() + 1});
    EXPECT_THROW(comm->reduce_scatter(odd), Error);
  }
  auto t = torch::zeros({2});
  EXPECT_THROW(comm->send(t, comm->rank()), Error);
  EXPECT_THROW(comm->broadcast(t, comm->size()), Error);
  comm->barrier();
}

TEST(CommHelpers, AllReduceGradientsEqualsHandSum) {
  auto comm = cpu_comm("grads");
  const int r = comm->rank(), n = comm->size();
  // Mixed dtypes and a bucket smaller than one parameter: several buckets, one split by dtype.
  std::vector<torch::Tensor> params = {torch::zeros({3, 2}, torch::kFloat32), torch::zeros({5}, torch::kFloat32),
                                       torch::zeros({2, 2}, torch::kFloat64), torch::zeros({7}, torch::kFloat32)};
  auto grad_of = [](size_t k, int rank, const torch::Tensor& p) {
    return (torch::arange(p.numel(), torch::kFloat64).view(p.sizes()) * static_cast<double>(k + 1) + rank).to(p.scalar_type());
  };
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].requires_grad_(true);
    // Rank 0 has no gradient for parameter 1 (it did not take part in the loss there).
    if (!(r == 0 && k == 1)) params[k].mutable_grad() = grad_of(k, r, params[k]);
  }
  all_reduce_gradients(*comm, params, 0.5, /*bucket_bytes=*/24);
  for (size_t k = 0; k < params.size(); ++k) {
    SCOPED_TRACE(k);
    auto expect = torch::zeros(params[k].sizes(), torch::kFloat64);
    for (int q = 0; q < n; ++q)
      if (!(q == 0 && k == 1)) expect += grad_of(k, q, params[k]).to(torch::kFloat64);
    ASSERT_TRUE(params[k].grad().defined());
    EXPECT_TENSOR_EQ(params[k].grad(), (expect * 0.5).to(params[k].scalar_type()));
  }
}

std::vector<std::string> gather_strings(Comm& comm, const std::string& s) {
  auto bytes = torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
  auto all = comm.all_gather(bytes);
  std::vector<std::string> out;
  for (int k = 0; k < comm.size(); ++k) {
    auto row = all[k].contiguous();
    out.emplace_back(static_cast<const char*>(row.data_ptr()), row.numel());
  }
  return out;
}

TEST(CommHelpers, BroadcastParametersInPlaceOverBf16) {
  auto comm = cpu_comm("weights");
  const int r = comm->rank(), root = 0;
  // Values are small integers, exact in bf16. Parameter 2 is a transposed (non-contiguous) view.
  auto value = [](int64_t numel, int k) { return torch::arange(numel, torch::kFloat32) + 10 * k; };
  auto backing = torch::zeros({3, 4});
  std::vector<torch::Tensor> params = {torch::zeros({4, 5}), torch::zeros({3}, torch::kFloat64), backing.t(),
                                       torch::zeros({0}), torch::zeros({9})};
  for (size_t k = 0; k < params.size(); ++k) {
    torch::NoGradGuard no_grad;
    const auto& p = params[k];
    p.copy_((r == root ? value(p.numel(), static_cast<int>(k)) : torch::full({p.numel()}, -1.0f - r)).view(p.sizes()));
    p.requires_grad_(true);
  }
  auto view = params[0].narrow(0, 1, 2);  // aliases parameter 0 (as packed weights would)

  const auto before = gather_strings(*comm, parameters_checksum(params, torch::kBFloat16));
  if (comm->size() > 1) {
    EXPECT_NE(before[0], before[1]);
  }

  const int64_t bytes = broadcast_parameters(*comm, params, root, torch::kBFloat16, /*bucket_bytes=*/14);
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();
  EXPECT_EQ(bytes, numel * 2);
  for (size_t k = 0; k < params.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_TENSOR_EQ(params[k].detach(), value(params[k].numel(), static_cast<int>(k)).view(params[k].sizes())
                                             .to(params[k].scalar_type()));
  }
  EXPECT_TENSOR_EQ(view.detach(), value(20, 0).view({4, 5}).narrow(0, 1, 2));
  EXPECT_TENSOR_EQ(backing, value(12, 2).view({4, 3}).t());

  const auto after = gather_strings(*comm, parameters_checksum(params, torch::kBFloat16));
  for (const auto& c : after) EXPECT_EQ(c, after[0]);
}

TEST(CommHelpers, ChecksumSeesValuesDtypeAndBoundaries) {
  auto a = torch::arange(6, torch::kFloat32);
  const auto c = parameters_checksum({a}, torch::kFloat32);
  EXPECT_EQ(c.size(), 16u);
  EXPECT_EQ(c, parameters_checksum({a.clone()}, torch::kFloat32));
  EXPECT_EQ(c, parameters_checksum({a.to(torch::kFloat64)}, torch::kFloat32));  // cast first
  EXPECT_NE(c, parameters_checksum({a + 1}, torch::kFloat32));
  EXPECT_NE(c, parameters_checksum({a}, torch::kBFloat16));
  EXPECT_NE(c, parameters_checksum({a.narrow(0, 0, 2), a.narrow(0, 2, 4)}, torch::kFloat32));
}

TEST(Watchdog, ReleasesFinishedAndForgottenCalls) {
  auto& wd = detail::Watchdog::instance();
  detail::CommIdentity id{"watched", "", 0, 1, 30.0};
  std::atomic<int> polls{0}, released{0};
  int owner_a = 0, owner_b = 0;
  for (int i = 0; i < 3; ++i) {
    detail::Watchdog::Item item;
    item.owner = &owner_a;
    item.call = detail::Call{&id, "all_reduce", 8};
    item.timeout_s = id.timeout_s;
    item.poll = [&polls](std::string*) {
      return ++polls > 5 ? detail::Watchdog::Status::kDone : detail::Watchdog::Status::kPending;
    };
    item.release = [&released] { ++released; };
    wd.watch(std::move(item));
  }
  detail::Watchdog::Item stuck;
  stuck.owner = &owner_b;
  stuck.call = detail::Call{&id, "broadcast", 8};
  stuck.timeout_s = id.timeout_s;
  stuck.poll = [](std::string*) { return detail::Watchdog::Status::kPending; };
  stuck.release = [&released] { released += 100; };
  wd.watch(std::move(stuck));

  for (int i = 0; i < 500 && released < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(released, 3);
  EXPECT_EQ(wd.pending(), 1u);
  wd.forget(&owner_b);
  EXPECT_EQ(released, 103);
  EXPECT_EQ(wd.pending(), 0u);
}

#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
TEST(CommNccl, Collectives) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // One GPU per rank when there are enough; otherwise each rank a group of its own (NCCL does not
  // put two ranks of one communicator on one GPU).
  const int gpus = static_cast<int>(torch::cuda::device_count());
  const bool whole = gpus >= world_size;
  const torch::Device device(torch::kCUDA, whole ? world_rank : 0);
  auto comm = make_comm(whole ? MPI_COMM_WORLD : MPI_COMM_SELF, device, CommOptions{"nccl", "", 60.0});
  EXPECT_STREQ(comm->backend(), "nccl");
  check_collectives(*comm, device);

  std::vector<torch::Tensor> params = {torch::ones({3, 3}, torch::TensorOptions().device(device)),
                                       torch::ones({4}, torch::TensorOptions().device(device).dtype(torch::kBFloat16))};
  for (auto& p : params) p.mutable_grad() = torch::full_like(p, 2);
  all_reduce_gradients(*comm, params, 0.25);
  for (auto& p : params) EXPECT_TENSOR_EQ(p.grad().cpu(), torch::full_like(p, 0.5 * comm->size()).cpu());
  EXPECT_EQ(broadcast_parameters(*comm, params, 0, torch::kBFloat16), 13 * 2);
  comm->barrier();
}

TEST(CommNccl, ForceMpiStagesThroughHost) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device device(torch::kCUDA, 0);
  auto comm = make_comm(MPI_COMM_WORLD, device, CommOptions{"staged", "", 60.0, /*force_mpi=*/true});
  EXPECT_STREQ(comm->backend(), "mpi");
  check_collectives(*comm, device);
}
#endif

// ---- the watchdog ends the job ----
//
// The DISABLED_ tests are the jobs' bodies: the tests below start them under a fresh mpirun
// (mpirun -np k <this binary> --gtest_also_run_disabled_tests --gtest_filter=...), and each is
// expected to die with the watchdog's message. A World gives them dice's identity and MPI_Abort hook.

constexpr double kJobTimeout_s = 2.0;

TEST(CommWatchdogJob, DISABLED_RankOneNeverJoins) {
  World world(nullptr, nullptr);
  auto comm = make_comm(world.comm(), torch::kCPU, CommOptions{"watchdog_test", "", kJobTimeout_s});
  auto t = torch::ones({1024});
  if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));  // stuck
  comm->all_reduce(t);
  ADD_FAILURE() << "all_reduce returned although rank 1 never joined";
}

TEST(CommWatchdogJob, DISABLED_AsyncCallNeverFinishes) {
  World world(nullptr, nullptr);
  detail::CommIdentity id{"async_test", "", world.rank(), world.size(), kJobTimeout_s};
  detail::Watchdog::Item item;
  item.owner = &id;
  item.call = detail::Call{&id, "reduce_scatter", 4096};
  item.timeout_s = kJobTimeout_s;
  item.poll = [](std::string*) { return detail::Watchdog::Status::kPending; };
  detail::Watchdog::instance().watch(std::move(item));
  std::this_thread::sleep_for(std::chrono::seconds(60));
  ADD_FAILURE() << "the background watchdog did not end the job";
}

#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
TEST(CommWatchdogJob, DISABLED_NcclCallBehindSpinningKernel) {
  World world(nullptr, nullptr);
  const torch::Device device(torch::kCUDA, 0);
  auto comm = make_comm(MPI_COMM_SELF, device, CommOptions{"nccl_watchdog_test", "", kJobTimeout_s});
  // A kernel that spins for seconds ahead of it on the stream: the all_reduce's event is still
  // pending when its deadline passes, which only the background thread can see (nothing waits).
  // The tensor is allocated first: on an H200, an allocation made behind the spinning kernel
  // waited for it, and the all_reduce then came too late to time out.
  auto t = torch::ones({256}, torch::TensorOptions().device(device));
  at::cuda::sleep(int64_t{10} * 1000 * 1000 * 1000);  // cycles: about 5 s at 2 GHz
  comm->all_reduce(t);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  ADD_FAILURE() << "the background watchdog did not end the job";
}
#endif

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The variables mpirun gives its ranks would make the inner mpirun think it is one of them; the
// user's own MCA settings (a launch agent, transports) are kept.
std::vector<std::string> clean_env() {
  auto starts = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool job = starts(kv, "PMIX_") || starts(kv, "PRTE_") || starts(kv, "OPAL_") || starts(kv, "PMI_") ||
               (starts(kv, "OMPI_") && !starts(kv, "OMPI_MCA_") && !starts(kv, "OMPI_ALLOW_RUN_AS_ROOT"));
    for (const char* p : {"OMPI_MCA_ess", "OMPI_MCA_orte_", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
                          "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe"})
      job = job || starts(kv, p);
    if (!job) env.push_back(kv);
  }
  env.push_back("OMP_NUM_THREADS=1");
  return env;
}

proc::RunResult run_job(int np, const std::string& test) {
  proc::SpawnOptions o;
  o.argv = {DICE_MPIEXEC, "-np", std::to_string(np), "--oversubscribe", self_exe(),
            "--gtest_also_run_disabled_tests", "--gtest_filter=" + test};
  o.env = clean_env();
  o.all_cpus = true;
  return proc::run(o, /*timeout_s=*/45);
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

TEST(CommWatchdog, CollectivePastDeadlineEndsJob) {
  if (world_rank() != 0) GTEST_SKIP() << "rank 0 runs the job";
  auto r = run_job(2, "CommWatchdogJob.DISABLED_RankOneNeverJoins");
  EXPECT_FALSE(r.status.timed_out) << r.err;
  EXPECT_FALSE(r.status.exited && r.status.code == 0) << r.err;
  EXPECT_LT(r.wall_s, 30.0);
  EXPECT_NE(r.err.find("did not finish within 2 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("collective all_reduce on 'watchdog_test' (group rank 0 of 2, 4096 bytes)"), std::string::npos)
      << r.err;
}

TEST(CommWatchdog, AsyncCallPastDeadlineEndsJob) {
  if (world_rank() != 0) GTEST_SKIP() << "rank 0 runs the job";
  auto r = run_job(1, "CommWatchdogJob.DISABLED_AsyncCallNeverFinishes");
  EXPECT_FALSE(r.status.timed_out) << r.err;
  EXPECT_FALSE(r.status.exited && r.status.code == 0) << r.err;
  EXPECT_LT(r.wall_s, 30.0);
  EXPECT_NE(r.err.find("collective reduce_scatter on 'async_test'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not finish within 2 s"), std::string::npos) << r.err;
}

#if defined(DICE_WITH_NCCL) && DICE_WITH_NCCL
TEST(CommWatchdog, NcclCallPastDeadlineEndsJob) {
  if (world_rank() != 0) GTEST_SKIP() << "rank 0 runs the job";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto r = run_job(1, "CommWatchdogJob.DISABLED_NcclCallBehindSpinningKernel");
  EXPECT_FALSE(r.status.timed_out) << r.err;
  EXPECT_FALSE(r.status.exited && r.status.code == 0) << r.err;
  EXPECT_LT(r.wall_s, 30.0);
  EXPECT_NE(r.err.find("collective all_reduce on 'nccl_watchdog_test' (group rank 0 of 1, 1024 bytes)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not finish within 2 s"), std::string::npos) << r.err;
}
#endif

}  // namespace
}  // namespace dice::dist
