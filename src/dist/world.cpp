// World: MPI init, node-local ranks, roles, control-plane collectives.
#include "dice/dist/world.h"

#include <cstdlib>
#include <cstring>

#include "dice/util/error.h"
#include "dice/util/log.h"

namespace dice::dist {
namespace {

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}
bool mpi_ok(int code) { return code == MPI_SUCCESS; }

#define DICE_CHECK_MPI(stmt) DICE_CHECK_GEN(stmt, mpi_ok, mpi_error_text)

void abort_mpi_hook() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::kColocated: return "colocated";
    case Role::kLearner: return "learner";
    case Role::kActor: return "actor";
  }
  return "?";
}

World::World(int* argc, char*** argv, const WorldOptions& opts) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    DICE_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  DICE_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  DICE_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));

  MPI_Comm node;
  DICE_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);

  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, len);

  if (opts.colocated || size_ == 1) {
    role_ = Role::kColocated;
  } else {
    DICE_REQUIRE(opts.num_learners >= 1 && opts.num_learners < size_, "with colocated=false, num_learners (",
                 opts.num_learners, ") must be between 1 and world size - 1 (world size ", size_, ")");
    role_ = rank_ < opts.num_learners ? Role::kLearner : Role::kActor;
  }
  DICE_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(role_), rank_, &role_comm_));
  log::set_identity(rank_, size_, role_name(role_));
  add_abort_hook(abort_mpi_hook);
}

World::~World() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // someone else (e.g. a test main) already finalized MPI
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  if (owns_mpi_) MPI_Finalize();
}

int World::device_index(int visible_devices) const {
  return visible_devices > 0 ? local_rank_ % visible_devices : -1;
}

void World::barrier() const { DICE_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); }

std::vector<std::string> World::gather(const std::string& bytes, int root) const {
  int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(rank_ == root ? size_ : 0);
  DICE_CHECK_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD));
  std::vector<int> displs(sizes.size(), 0);
  int total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) { displs[i] = total; total += sizes[i]; }
  std::string all(static_cast<size_t>(total), '\0');
  DICE_CHECK_MPI(MPI_Gatherv(bytes.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, root,
                             MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back(all.substr(displs[i], sizes[i]));
  return out;
}

std::vector<std::string> World::all_gather(const std::string& bytes) const {
  auto parts = gather(bytes, 0);
  std::string packed;
  if (is_root())
    for (const auto& p : parts) packed += std::to_string(p.size()) + ":" + p;
  packed = broadcast(packed, 0);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < packed.size()) {
    size_t colon = packed.find(':', pos);
    size_t n = std::stoul(packed.substr(pos, colon - pos));
    out.push_back(packed.substr(colon + 1, n));
    pos = colon + 1 + n;
  }
  return out;
}

std::string World::broadcast(const std::string& bytes, int root) const {
  long long n = rank_ == root ? static_cast<long long>(bytes.size()) : 0;
  DICE_CHECK_MPI(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD));
  std::string out = rank_ == root ? bytes : std::string(static_cast<size_t>(n), '\0');
  DICE_CHECK_MPI(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD));
  return out;
}

double World::sum(double v) const {
  double out = 0;
  DICE_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return out;
}

int64_t World::sum(int64_t v) const {
  long long in = v, out = 0;
  DICE_CHECK_MPI(MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  return out;
}

bool World::all(bool v) const {
  int in = v ? 1 : 0, out = 0;
  DICE_CHECK_MPI(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return out != 0;
}

void World::abort(const std::string& why) const {
  log::error(why);
  dice::fatal("World::abort", __FILE__, __LINE__, why);
}

Shard shard_range(int64_t n, int rank, int size) {
  int64_t base = n / size, extra = n % size;
  Shard s;
  s.begin = rank * base + std::min<int64_t>(rank, extra);
  s.end = s.begin + base + (rank < extra ? 1 : 0);
  return s;
}

}  // namespace dice::dist
