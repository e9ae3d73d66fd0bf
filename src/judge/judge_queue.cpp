// JudgeQueue: batches of whatever was submitted, judged on a worker thread (see judge_queue.h).
#include "dice/judge/judge_queue.h"

#include <algorithm>

#include "dice/util/timer.h"

namespace dice::judge {
namespace {
double now_s() {
  static const Timer clock;
  return clock.elapsed_s();
}
}  // namespace

JudgeQueue::JudgeQueue(Judge& judge, VerdictKeyFn on_verdict)
    : judge_(judge), on_verdict_(std::move(on_verdict)), worker_([this] { work(); }) {}

JudgeQueue::~JudgeQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void JudgeQueue::submit(int64_t key, Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_s_[key] = now_s();
    auto [it, first] = first_.emplace(std::make_pair(job.task ? job.task->id : std::string(),
                                                     (job.is_code ? "code:" : "response:") + job.text),
                                      key);
    if (!first && job.task) {
      ++copies_pending_;
      if (done_.count(it->second)) {
        copy_now_.emplace_back(key, it->second);
      } else {
        copies_[it->second].push_back(key);
      }
      cv_.notify_all();
      return;
    }
    waiting_.emplace_back(key, std::move(job));
    stats_.max_waiting = std::max<int64_t>(stats_.max_waiting, static_cast<int64_t>(waiting_.size()));
  }
  cv_.notify_all();
}

std::map<int64_t, Verdict> JudgeQueue::drain(QueueStats* stats) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (waiting_.empty() && in_flight_ == 0 && copies_pending_ == 0) || error_; });
  first_.clear();
  copies_.clear();
  copy_now_.clear();
  copies_pending_ = 0;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    waiting_.clear();
    std::rethrow_exception(e);
  }
  if (stats) *stats = stats_;
  stats_ = QueueStats{};
  submitted_s_.clear();
  return std::move(done_);
}

void JudgeQueue::copy_verdict(int64_t key, int64_t first) {
  Verdict v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    v = done_.at(first);
  }
  v.same_as = static_cast<int>(first);
  v.compile_s = v.exec_s = 0;
  v.cache_hit = v.compiled;
  if (on_verdict_) on_verdict_(key, v);
  std::lock_guard<std::mutex> lock(mu_);
  done_[key] = std::move(v);
  stats_.latency_s.push_back(now_s() - submitted_s_[key]);
  --copies_pending_;
}

void JudgeQueue::work() {
  for (;;) {
    std::vector<std::pair<int64_t, Job>> batch;
    std::vector<std::pair<int64_t, int64_t>> copies;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !copy_now_.empty(); });
      copies.swap(copy_now_);
    }
    for (const auto& [key, first] : copies) copy_verdict(key, first);
    if (!copies.empty()) cv_.notify_all();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (waiting_.empty()) {
        if (stop_ && copy_now_.empty()) return;  // stopping, nothing left
        continue;
      }
      batch.swap(waiting_);
      in_flight_ = static_cast<int64_t>(batch.size());
      ++stats_.batches;
    }
    std::vector<Job> jobs;
    for (const auto& [key, job] : batch) jobs.push_back(job);
    try {
      judge_.judge(jobs, nullptr, [&](size_t i, const Verdict& v) {
        const int64_t key = batch[i].first;
        if (on_verdict_) on_verdict_(key, v);  // outside the lock: submit() is never held up by it
        std::vector<int64_t> later;
        {
          std::lock_guard<std::mutex> lock(mu_);
          done_[key] = v;
          stats_.latency_s.push_back(now_s() - submitted_s_[key]);
          auto it = copies_.find(key);
          if (it != copies_.end()) {
            later = std::move(it->second);
            copies_.erase(it);
          }
        }
        for (int64_t k : later) copy_verdict(k, key);
      });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = 0;
    }
    cv_.notify_all();
  }
}

}  // namespace dice::judge
