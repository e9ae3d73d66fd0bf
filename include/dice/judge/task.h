#pragma once
// A kernel task (DESIGN §4 "Tasks"): one JSONL line per task.
#include <optional>
#include <string>
#include <vector>

namespace dice::judge {

struct Infill {
  std::string prefix;  // code before the part the model writes
  std::string suffix;  // code after it
};

struct Task {
  std::string id;          // unique within a task set, e.g. "kb_L1_19_ReLU" or "builtin_cpu_003_relu"
  int level = 1;           // KernelBench level (1 single op, 2 fused, 3 architecture); 0 = trivial
  double difficulty = 0;   // curriculum order key: tasks are consumed easy -> hard
  std::string reference;   // KernelBench-style PyTorch file: Model, get_inputs, get_init_inputs
  std::optional<Infill> infill;
  std::string solution;    // optional reference ModelNew file (honest solution), "" if none
  std::string device = "cuda";  // "cuda" (CUDA candidates, GPU) or "cpu" (C++-only load_inline, CI)
};

// JSONL I/O; errors name the file and line.
std::vector<Task> load_tasks(const std::string& path);
void save_tasks(const std::string& path, const std::vector<Task>& tasks);

}  // namespace dice::judge
