// World: MPI init, node-local ranks, roles, control-plane collectives.
#include "dice/dist/world.h"

#include <cstdlib>
#include <cstring>

#include "dice/util/error.h"
#include "dice/util/log.h"
#include "watchdog.h"

namespace dice::dist {
namespace {
using detail::mpi_error_text;

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
  DICE_CHECK_MPI(MPI_Comm_rank(role_comm_, &role_rank_));
  log::set_identity(rank_, size_, role_name(role_));
  timeout_s_ = opts.timeout_s;
  add_abort_hook(abort_mpi_hook);
}

SubComm SubComm::split(MPI_Comm parent, bool member, int key) {
  SubComm s;
  DICE_CHECK_MPI(MPI_Comm_split(parent, member ? 0 : MPI_UNDEFINED, key, &s.comm_));
  return s;
}

SubComm::~SubComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

SubComm& SubComm::operator=(SubComm&& o) noexcept {
  if (this != &o) {
    SubComm gone(std::move(*this));  // frees ours
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
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

// Control collectives: nonblocking MPI polled against WorldOptions::timeout_s (dist/watchdog.h),
// so a rank that never arrives ends the job with a message instead of a hang.
namespace {
void wait_control(MPI_Request& req, const char* op, int64_t bytes, const World& w, double timeout_s) {
  detail::CommIdentity id;
  id.name = "world (control)";
  id.role = role_name(w.role());
  id.rank = w.rank();
  id.size = w.size();
  id.timeout_s = timeout_s;
  detail::Call call{&id, op, bytes, -1};
  detail::wait_mpi(req, call);
}
}  // namespace

void World::barrier() const {
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &r));
  wait_control(r, "barrier", 0, *this, timeout_s_);
}

std::vector<std::string> World::gather(const std::string& bytes, int root) const {
  int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(rank_ == root ? size_ : 0);
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD, &r));
  wait_control(r, "gather", sizeof n, *this, timeout_s_);
  std::vector<int> displs(sizes.size(), 0);
  int total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) { displs[i] = total; total += sizes[i]; }
  std::string all(static_cast<size_t>(total), '\0');
  DICE_CHECK_MPI(MPI_Igatherv(bytes.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, root,
                              MPI_COMM_WORLD, &r));
  wait_control(r, "gather", n, *this, timeout_s_);
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
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Ibcast(&n, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD, &r));
  wait_control(r, "broadcast", sizeof n, *this, timeout_s_);
  std::string out = rank_ == root ? bytes : std::string(static_cast<size_t>(n), '\0');
  DICE_CHECK_MPI(MPI_Ibcast(out.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD, &r));
  wait_control(r, "broadcast", n, *this, timeout_s_);
  return out;
}

double World::sum(double v) const {
  double out = 0;
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
  wait_control(r, "sum", sizeof v, *this, timeout_s_);
  return out;
}

int64_t World::sum(int64_t v) const {
  long long in = v, out = 0;
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Iallreduce(&in, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &r));
  wait_control(r, "sum", sizeof in, *this, timeout_s_);
  return out;
}

bool World::all(bool v) const {
  int in = v ? 1 : 0, out = 0;
  MPI_Request r;
  DICE_CHECK_MPI(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r));
  wait_control(r, "all", sizeof in, *this, timeout_s_);
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
