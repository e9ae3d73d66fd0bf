#pragma once
// JudgeQueue: the judge's submit / drain interface, so candidates are judged while something else
// runs (the actor's sampler on the GPU):
//
//   JudgeQueue q(judge);
//   sampler.set_on_record([&](int64_t i, const SampleRecord& r) { q.submit(i, {&task, text(r), false}); });
//   sampler.generate(prompts);
//   auto verdicts = q.drain();   // key -> verdict, every submitted job
//
// A worker thread judges what has been submitted since its last batch as one Judge::judge call
// (so a batch's builds run in parallel in the compile pool and its executions overlap its
// builds); jobs submitted meanwhile wait for the next batch. Judge::judge is only ever called from
// the worker. A judge error is rethrown by drain().
// A job with the same task and text as one submitted earlier since the last drain() is not judged
// again: it gets that job's verdict, with `same_as` set to that job's key.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dice/judge/judge.h"

namespace dice::judge {

struct QueueStats {
  int64_t batches = 0;
  int64_t max_waiting = 0;         // most jobs waiting for a batch at once
  std::vector<double> latency_s;   // per job: submit -> verdict
};

class JudgeQueue {
 public:
  // `on_verdict(key, verdict)`, when given, is called on the worker thread as each verdict is final
  // (one call at a time), e.g. to store the record before the rest of the batch is done.
  using VerdictKeyFn = std::function<void(int64_t key, const Verdict& verdict)>;
  explicit JudgeQueue(Judge& judge, VerdictKeyFn on_verdict = nullptr);
  ~JudgeQueue();  // waits for the jobs in flight
  JudgeQueue(const JudgeQueue&) = delete;
  JudgeQueue& operator=(const JudgeQueue&) = delete;

  // `job.task` must stay valid until drain() returns. Keys must be unique.
  void submit(int64_t key, Job job);
  // Blocks until every submitted job has its verdict; returns them and the stats, and resets.
  std::map<int64_t, Verdict> drain(QueueStats* stats = nullptr);

 private:
  void work();
  void copy_verdict(int64_t key, int64_t first);  // the worker thread, outside mu_

  Judge& judge_;
  VerdictKeyFn on_verdict_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<int64_t, Job>> waiting_;
  std::map<int64_t, double> submitted_s_;
  std::map<int64_t, Verdict> done_;
  std::map<std::pair<std::string, std::string>, int64_t> first_;  // (task id, kind + text) -> key
  std::map<int64_t, std::vector<int64_t>> copies_;  // first key -> later keys waiting for its verdict
  std::vector<std::pair<int64_t, int64_t>> copy_now_;  // (key, first key) whose first is already done
  int64_t copies_pending_ = 0;
  QueueStats stats_;
  int64_t in_flight_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace dice::judge
