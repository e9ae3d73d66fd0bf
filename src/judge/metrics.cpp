// KernelBench-style metrics: Exec, compile rate, fast_p, geomean speedup, pass@k (see metrics.h).
#include "dice/judge/metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::judge {

double pass_at_k(int n, int c, int k) {
  DICE_REQUIRE(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n, "pass@k needs 0 <= c <= n and 1 <= k <= n, got n=", n,
               " c=", c, " k=", k);
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)
  double fail = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail;
}

namespace {

// Accumulates one group (a level, or everything).
struct Acc {
  std::vector<const Task*> tasks;
  std::map<std::string, std::vector<const Verdict*>> by_task;
};

GroupMetrics finish(const Acc& a, int n, const MetricsOptions& opts) {
  GroupMetrics g;
  g.tasks = static_cast<int>(a.tasks.size());
  g.samples_per_task = n;
  g.expected = static_cast<long>(g.tasks) * n;
  std::map<double, long> fast;
  for (double p : opts.fast_p) fast[p] = 0;
  double log_sum = 0;
  std::map<int, double> pass_sum;
  for (const Task* t : a.tasks) {
    auto it = a.by_task.find(t->id);
    const std::vector<const Verdict*> none;
    const auto& vs = it == a.by_task.end() ? none : it->second;
    int c = 0;
    for (const Verdict* v : vs) {
      ++g.judged;
      if (v->compiled) ++g.compiled;
      for (const auto& f : v->findings) ++g.findings[f.check][f.severity];
      if (!v->correct) {
        ++g.failures[v->failure == Failure::kNone ? "unclassified" : failure_name(v->failure)];
        continue;
      }
      ++c;
      ++g.correct;
      if (v->speedup > 0) {
        ++g.timed_correct;
        log_sum += std::log(v->speedup);
      }
      for (auto& [p, count] : fast)
        if (p <= 0 || v->speedup > p) ++count;
    }
    const long missing = std::max<long>(0, n - static_cast<long>(vs.size()));
    if (missing > 0) g.failures["missing"] += missing;
    g.missing += missing;
    for (int k : opts.pass_k)
      if (k >= 1 && k <= n) pass_sum[k] += pass_at_k(n, std::min(c, n), k);
  }
  if (g.expected > 0) {
    g.compile_rate = static_cast<double>(g.compiled) / g.expected;
    g.exec = static_cast<double>(g.correct) / g.expected;
    for (auto& [p, count] : fast) g.fast_p[p] = static_cast<double>(count) / g.expected;
  } else {
    for (auto& [p, count] : fast) g.fast_p[p] = 0;
  }
  if (g.timed_correct > 0) g.geomean_speedup = std::exp(log_sum / g.timed_correct);
  if (g.tasks > 0)
    for (auto& [k, s] : pass_sum) g.pass_at_k[k] = s / g.tasks;
  return g;
}

std::string number_key(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

nlohmann::ordered_json group_json(const GroupMetrics& g) {
  nlohmann::ordered_json j;
  j["tasks"] = g.tasks;
  j["samples_per_task"] = g.samples_per_task;
  j["expected"] = g.expected;
  j["judged"] = g.judged;
  j["missing"] = g.missing;
  j["compiled"] = g.compiled;
  j["correct"] = g.correct;
  j["compile_rate"] = g.compile_rate;
  j["exec"] = g.exec;
  nlohmann::ordered_json fp = nlohmann::ordered_json::object();
  for (const auto& [p, r] : g.fast_p) fp[number_key(p)] = r;
  j["fast_p"] = fp;
  j["timed_correct"] = g.timed_correct;
  j["geomean_speedup"] = g.timed_correct > 0 ? nlohmann::ordered_json(g.geomean_speedup) : nlohmann::ordered_json();
  nlohmann::ordered_json pk = nlohmann::ordered_json::object();
  for (const auto& [k, r] : g.pass_at_k) pk[std::to_string(k)] = r;
  j["pass_at_k"] = pk;
  j["failures"] = g.failures;
  j["findings"] = g.findings;
  return j;
}

}  // namespace

Metrics compute_metrics(const std::vector<Verdict>& verdicts, const std::vector<Task>& tasks,
                        const MetricsOptions& opts) {
  check_unique_ids(tasks, "the task list for metrics");
  Metrics m;
  std::map<std::string, const Task*> by_id;
  for (const auto& t : tasks) by_id[t.id] = &t;
  Acc all;
  std::map<int, Acc> levels;
  for (const auto& t : tasks) {
    all.tasks.push_back(&t);
    levels[t.level].tasks.push_back(&t);
  }
  std::map<std::string, int> count;
  for (const auto& v : verdicts) {
    auto it = by_id.find(v.task_id);
    if (it == by_id.end()) {
      ++m.unknown_task_verdicts;
      continue;
    }
    all.by_task[v.task_id].push_back(&v);
    levels[it->second->level].by_task[v.task_id].push_back(&v);
    ++count[v.task_id];
  }
  int n = 1;
  for (const auto& [id, c] : count) n = std::max(n, c);
  m.overall = finish(all, n, opts);
  for (const auto& [level, acc] : levels) m.by_level[level] = finish(acc, n, opts);
  return m;
}

std::vector<Verdict> load_verdicts(const std::string& path) {
  const std::string text = fs::read_file(path);
  std::vector<Verdict> out;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("verdict") && j["verdict"].is_object()) {
        nlohmann::json v = j["verdict"];
        if (!v.contains("task_id") && j.contains("task_id")) v["task_id"] = j["task_id"];
        j = std::move(v);
      }
      out.push_back(j.get<Verdict>());
    } catch (const nlohmann::json::exception& e) {
      throw Error(str(path, ":", line_no, ": not a verdict record (", e.what(), ")"));
    } catch (const Error& e) {
      throw Error(str(path, ":", line_no, ": ", e.what()));
    }
  }
  return out;
}

std::string metrics_to_json(const Metrics& m, int indent) {
  nlohmann::ordered_json j;
  j["overall"] = group_json(m.overall);
  nlohmann::ordered_json lv = nlohmann::ordered_json::object();
  for (const auto& [level, g] : m.by_level) lv[std::to_string(level)] = group_json(g);
  j["levels"] = lv;
  j["unknown_task_verdicts"] = m.unknown_task_verdicts;
  return j.dump(indent);
}

std::string metrics_summary(const Metrics& m) {
  std::ostringstream os;
  auto pct = [](double r) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * r);
    return std::string(buf);
  };
  auto line = [&](const std::string& name, const GroupMetrics& g) {
    os << name << ": " << g.tasks << " tasks x " << g.samples_per_task << " samples, compiled " << pct(g.compile_rate)
       << ", exec " << pct(g.exec);
    for (const auto& [p, r] : g.fast_p) os << ", fast_" << number_key(p) << " " << pct(r);
    if (g.timed_correct > 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3fx", g.geomean_speedup);
      os << ", geomean speedup " << buf << " (" << g.timed_correct << " timed)";
    }
    for (const auto& [k, r] : g.pass_at_k) os << ", pass@" << k << " " << pct(r);
    if (g.missing > 0) os << ", " << g.missing << " missing";
    os << "\n";
  };
  line("overall", m.overall);
  for (const auto& [level, g] : m.by_level) line("level " + std::to_string(level), g);
  if (m.unknown_task_verdicts > 0) os << m.unknown_task_verdicts << " verdict(s) for tasks not in the task list\n";
  return os.str();
}

}  // namespace dice::judge
