#pragma once
// World: the MPI job as dice sees it — init/finalize (RAII), rank and size, local rank on the
// node (-> GPU index), the role of this rank, and the few control-plane collectives the
// drivers need (barrier, broadcast and gather of byte strings, sums). Tensor collectives over
// NCCL live in Comm (dist/comm.h) and come with the distributed trainer.
//
// Roles (DESIGN §2): with `colocated` every rank is both learner and actor; otherwise the
// first `num_learners` ranks are learners and the rest actors, and role_comm() holds the ranks
// of this rank's role.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dice::dist {

enum class Role { kColocated, kLearner, kActor };
const char* role_name(Role r);

struct WorldOptions {
  bool colocated = true;
  int num_learners = 0;       // only when !colocated; must be in [1, size-1]
  double timeout_s = 1800;    // control collectives that wait longer abort the job with a message (<= 0: never)
};

// A communicator of some of the world's ranks, owned by this process (freed on destruction, unless
// MPI was finalized first). comm() is MPI_COMM_NULL on the ranks that are not members.
class SubComm {
 public:
  SubComm() = default;
  // Every rank of `parent` calls it; the members, ordered by `key`, get the new communicator.
  static SubComm split(MPI_Comm parent, bool member, int key);
  ~SubComm();
  SubComm(SubComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  SubComm& operator=(SubComm&& o) noexcept;
  SubComm(const SubComm&) = delete;
  SubComm& operator=(const SubComm&) = delete;
  MPI_Comm comm() const { return comm_; }
  bool member() const { return comm_ != MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class World {
 public:
  // Initializes MPI if needed (finalized by the destructor of the World that initialized it).
  World(int* argc, char*** argv, const WorldOptions& opts = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  bool is_root() const { return rank_ == 0; }
  Role role() const { return role_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }
  MPI_Comm role_comm() const { return role_comm_; }
  int role_rank() const { return role_rank_; }  // this rank's index among the ranks of its role
  const std::string& host() const { return host_; }

  // The GPU this rank should use: local_rank mod visible devices (-1 when there are none).
  int device_index(int visible_devices) const;

  void barrier() const;
  // Every rank's bytes, in rank order, on root (other ranks get an empty vector).
  std::vector<std::string> gather(const std::string& bytes, int root = 0) const;
  std::vector<std::string> all_gather(const std::string& bytes) const;
  std::string broadcast(const std::string& bytes, int root = 0) const;
  double sum(double v) const;
  int64_t sum(int64_t v) const;
  bool all(bool v) const;

  // Aborts every rank (after running dice's abort hooks) with a message; for fatal paths.
  [[noreturn]] void abort(const std::string& why) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, role_rank_ = 0;
  Role role_ = Role::kColocated;
  MPI_Comm role_comm_ = MPI_COMM_NULL;
  std::string host_;
  bool owns_mpi_ = false;
  double timeout_s_ = 1800;
};

// Contiguous shard [begin, end) of n items for `rank` of `size` (balanced: sizes differ by <= 1).
struct Shard {
  int64_t begin = 0, end = 0;
};
Shard shard_range(int64_t n, int rank, int size);

}  // namespace dice::dist
