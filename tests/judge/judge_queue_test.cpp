// JudgeQueue: every submitted job gets its verdict under its key, submissions made while a batch
// is judged go to a later batch, and the queue is reusable after drain().
#include "dice/judge/judge_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

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

TEST(JudgeQueue, TheSameJobTwiceIsJudgedOnceUntilDrain) {
  Judge judge(testing::test_config());
  Task relu = testing::cpu_task("relu"), rowsum = testing::cpu_task("rowsum");
  std::atomic<bool> first_done{false};
  std::vector<int64_t> reported;
  std::mutex mu;
  JudgeQueue q(judge, [&](int64_t key, const Verdict&) {
    std::lock_guard<std::mutex> lock(mu);
    reported.push_back(key);
    if (key == 1) first_done = true;
  });
  q.submit(1, {&relu, "no code, answer A", false});
  q.submit(2, {&relu, "no code, answer A", false});    // waits for 1's verdict (or is in 1's batch's wake)
  q.submit(3, {&rowsum, "no code, answer A", false});  // another task: judged on its own
  q.submit(4, {&relu, "no code, answer A", true});     // as code, not as a response: judged on its own
  while (!first_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  q.submit(5, {&relu, "no code, answer A", false});  // its first is already done
  auto v = q.drain();
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v.at(1).same_as, -1);
  EXPECT_EQ(v.at(2).same_as, 1);
  EXPECT_EQ(v.at(3).same_as, -1);
  EXPECT_EQ(v.at(4).same_as, -1);
  EXPECT_EQ(v.at(5).same_as, 1);
  EXPECT_EQ(v.at(2).failure, Failure::kNoCode);
  EXPECT_EQ(v.at(5).task_id, relu.id);
  EXPECT_EQ(v.at(3).task_id, rowsum.id);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(reported.size(), 5u);  // every key reported once, copies included
  }
  // after drain() the same job is judged afresh
  q.submit(6, {&relu, "no code, answer A", false});
  EXPECT_EQ(q.drain().at(6).same_as, -1);
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
