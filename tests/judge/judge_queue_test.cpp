// JudgeQueue: every submitted job gets its verdict under its key, submissions made while a batch
// is judged go to a later batch, and the queue is reusable after drain().
#include "dice/judge/judge_queue.h"

#include <gtest/gtest.h>

#include "dice/util/error.h"
#include "judge/judge_testing.h"

namespace dice::judge {
namespace {

TEST(JudgeQueue, EveryJobGetsItsVerdictUnderItsKey) {
  Judge judge(testing::test_config());
  Task t = testing::cpu_task("relu");
  JudgeQueue q(judge);
  // Responses without a code block: the judge answers without building anything.
  for (int64_t k = 0; k < 5; ++k) q.submit(100 + k, {&t, "no code here, attempt " + std::to_string(k), false});
  QueueStats st;
  auto v = q.drain(&st);
  ASSERT_EQ(v.size(), 5u);
  for (int64_t k = 0; k < 5; ++k) {
    ASSERT_TRUE(v.count(100 + k));
    EXPECT_EQ(v.at(100 + k).failure, Failure::kNoCode);
    EXPECT_EQ(v.at(100 + k).task_id, t.id);
  }
  EXPECT_EQ(st.latency_s.size(), 5u);
  EXPECT_GE(st.batches, 1);
  // Reusable: a second round, nothing left over from the first.
  q.submit(7, {&t, "still no code", false});
  auto v2 = q.drain(&st);
  ASSERT_EQ(v2.size(), 1u);
  EXPECT_TRUE(v2.count(7));
  EXPECT_EQ(st.latency_s.size(), 1u);
}

TEST(JudgeQueue, DrainWithNothingSubmittedReturnsAtOnce) {
  Judge judge(testing::test_config());
  JudgeQueue q(judge);
  EXPECT_TRUE(q.drain().empty());
}

TEST(JudgeQueue, JudgeErrorsReachDrain) {
  Judge judge(testing::test_config());
  JudgeQueue q(judge);
  q.submit(1, {nullptr, "a job without a task", false});
  EXPECT_THROW(q.drain(), dice::Error);
}

}  // namespace
}  // namespace dice::judge
