// dist::World under mpirun -np 2 (and np 1): ranks, roles, control collectives, sharding.
#include <gtest/gtest.h>

#include "dice/dist/world.h"

namespace dice::dist {
namespace {

World& world() {
  static World w(nullptr, nullptr, WorldOptions{});
  return w;
}

TEST(World, RanksAndLocalRanks) {
  auto& w = world();
  EXPECT_GE(w.size(), 1);
  EXPECT_LT(w.rank(), w.size());
  EXPECT_EQ(w.local_size(), w.size());  // single-node test
  EXPECT_EQ(w.local_rank(), w.rank());
  EXPECT_EQ(w.device_index(1), 0);
  EXPECT_EQ(w.device_index(0), -1);
  EXPECT_EQ(w.role(), Role::kColocated);
}

TEST(World, GatherBroadcastSum) {
  auto& w = world();
  std::string mine = "rank" + std::to_string(w.rank()) + std::string(w.rank() * 3, 'x');
  auto got = w.gather(mine);
  if (w.is_root()) {
    ASSERT_EQ(static_cast<int>(got.size()), w.size());
    for (int r = 0; r < w.size(); ++r) EXPECT_EQ(got[r], "rank" + std::to_string(r) + std::string(r * 3, 'x'));
  } else {
    EXPECT_TRUE(got.empty());
  }
  auto all = w.all_gather(mine);
  ASSERT_EQ(static_cast<int>(all.size()), w.size());
  EXPECT_EQ(all[w.rank()], mine);
  EXPECT_EQ(w.broadcast(w.is_root() ? std::string("hello\0world", 11) : ""), std::string("hello\0world", 11));
  EXPECT_EQ(w.sum(static_cast<int64_t>(w.rank() + 1)), static_cast<int64_t>(w.size() * (w.size() + 1) / 2));
  EXPECT_DOUBLE_EQ(w.sum(0.5), 0.5 * w.size());
  EXPECT_TRUE(w.all(true));
  EXPECT_FALSE(w.all(w.rank() != 0));
}

TEST(Shard, CoversEverythingOnce) {
  for (int64_t n : {0, 1, 5, 7, 100})
    for (int size : {1, 2, 3, 8}) {
      int64_t expect_begin = 0;
      for (int r = 0; r < size; ++r) {
        auto s = shard_range(n, r, size);
        EXPECT_EQ(s.begin, expect_begin);
        EXPECT_LE(s.end - s.begin, n / size + 1);
        EXPECT_GE(s.end - s.begin, n / size);
        expect_begin = s.end;
      }
      EXPECT_EQ(expect_begin, n);
    }
}

}  // namespace
}  // namespace dice::dist
