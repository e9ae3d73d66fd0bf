#pragma once
// KernelBench-style metrics over a set of verdicts (DESIGN §5; reference/kernel-judging.md §1.4).
//
// The denominator is the TASK LIST, not the verdicts: every task is expected to have n samples,
// n = the largest number of verdicts any task has, and a missing sample counts as a failure (not
// compiled, not correct). Verdicts for ids outside the task list are counted and otherwise ignored.
// All rates are fractions in [0, 1], per level and overall:
//   compile_rate  compiled samples / expected samples
//   exec          correct samples / expected samples (KernelBench "Exec", = fast_0)
//   fast_p        samples correct AND faster than p x / expected samples; speedup > p is required for
//                 p > 0, while for p <= 0 every correct sample counts (an untimed correct sample
//                 has speedup -1), so fast_0 == exec as in KernelBench
//   geomean_speedup  geometric mean of speedup over correct samples that were timed (speedup > 0);
//                 absent when none was timed
//   pass_at_k     mean over tasks of 1 - C(n - c, k) / C(n, k) (the unbiased estimator; c = correct
//                 samples of the task), for each k <= n
// plus counts of failure classes (failure_name of each non-correct verdict, "missing" for absent
// samples) and of static-check findings per check and severity.
#include <map>
#include <string>
#include <vector>

#include "dice/judge/task.h"
#include "dice/judge/verdict.h"

namespace dice::judge {

struct MetricsOptions {
  std::vector<double> fast_p = {0.0, 1.0, 2.0};
  std::vector<int> pass_k = {1, 5, 10};

  template <class V> void visit(V& v) {
    v("fast_p", fast_p, "speedup thresholds p for fast_p");
    v("pass_k", pass_k, "k values for pass@k (reported when k <= samples per task)");
  }
};

struct GroupMetrics {
  int tasks = 0;
  int samples_per_task = 0;  // n
  long expected = 0;         // tasks * n
  long judged = 0;           // verdicts that belong to these tasks
  long missing = 0;          // expected - judged (never negative)
  long compiled = 0;
  long correct = 0;
  long timed_correct = 0;    // correct with speedup > 0
  double compile_rate = 0;
  double exec = 0;
  std::map<double, double> fast_p;        // p -> rate
  double geomean_speedup = 0;             // valid when timed_correct > 0
  std::map<int, double> pass_at_k;        // k -> mean estimator, only k <= n
  std::map<std::string, long> failures;   // failure class name (or "missing") -> count
  std::map<std::string, std::map<std::string, long>> findings;  // check -> severity -> count
};

struct Metrics {
  GroupMetrics overall;
  std::map<int, GroupMetrics> by_level;
  long unknown_task_verdicts = 0;
};

Metrics compute_metrics(const std::vector<Verdict>& verdicts, const std::vector<Task>& tasks,
                        const MetricsOptions& opts = {});

// Reads verdicts from JSONL: either verdict records (task_id, compiled, correct, speedup, failure,
// findings, ...) or sample records that carry the verdict under "verdict" (rollouts, eval results;
// the record's task_id is used when the verdict has none). Errors name file:line.
std::vector<Verdict> load_verdicts(const std::string& path);

// 1 - C(n - c, k) / C(n, k), computed as a product (no factorials, no overflow). Requires
// 0 <= c <= n and 1 <= k <= n; throws dice::Error otherwise.
double pass_at_k(int n, int c, int k);

// {"overall": {...}, "levels": {"1": {...}}, "unknown_task_verdicts": N}; key names as the fields.
std::string metrics_to_json(const Metrics& m, int indent = 2);
// A few human-readable lines (percentages) for logs and reports.
std::string metrics_summary(const Metrics& m);

}  // namespace dice::judge
