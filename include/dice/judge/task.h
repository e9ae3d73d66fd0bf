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

// A wrong twin of a task's solution: it compiles and runs, and computes something else (an off-by-one
// bound, a wrong constant, a missing term). SFT data with twins gives a model that writes both, for
// RL with the real judge to tell apart.
struct WrongSolution {
  std::string kind;  // what is wrong, e.g. "off_by_one", "wrong_constant", "missing_term"
  std::string code;  // the whole ModelNew file
};

struct Task {
  std::string id;          // unique within a task set, e.g. "kb_L1_19_ReLU" or "builtin_cpu_003_relu"
  int level = 1;           // KernelBench level (1 single op, 2 fused, 3 architecture); 0 = trivial
  double difficulty = 0;   // curriculum order key: tasks are consumed easy -> hard
  std::string reference;   // KernelBench-style PyTorch file: Model, get_inputs, get_init_inputs
  std::optional<Infill> infill;
  std::string solution;    // optional reference ModelNew file (honest solution), "" if none
  std::string device = "cuda";  // "cuda" (CUDA candidates, GPU) or "cpu" (C++-only load_inline, CI)
  std::vector<WrongSolution> wrong_solutions;  // optional wrong twins of `solution`
};

// JSONL I/O; errors name the file and line.
//
// One JSON object per line with keys id (non-empty string), level (integer), difficulty (number),
// reference (non-empty string), optional infill {prefix, suffix} (strings), optional solution
// (string), optional device ("cuda" default, or "cpu"), optional wrong_solutions [{kind, code}]
// (strings). Blank lines are skipped; unknown keys, a
// wrong type and a repeated id are rejected with "<file>:<line>: ..." naming the field.
std::vector<Task> load_tasks(const std::string& path);
// Writes atomically (a reader never sees half a file); rejects duplicate or empty ids.
void save_tasks(const std::string& path, const std::vector<Task>& tasks);

// One record <-> one JSON line (no trailing newline); `where` prefixes errors, e.g. "f.jsonl:3".
Task parse_task_line(const std::string& line, const std::string& where);
std::string task_to_json_line(const Task& task);

// Throws dice::Error naming both positions when two tasks share an id.
void check_unique_ids(const std::vector<Task>& tasks, const std::string& what);

// ---- importers (task_import.cpp) ----

// A KernelBench checkout: `dir` is the repository root (holding KernelBench/level<L>/) or the
// KernelBench/ folder itself. Each level<L>/<N>_<Name>.py becomes id "kb_L<L>_<N>_<Name>", sorted by
// the numeric prefix N; difficulty = L + i / n for the i-th of n problems of that level, so levels
// are consumed in order and problems in file order. device "cuda", no solution.
std::vector<Task> import_kernelbench(const std::string& dir, const std::vector<int>& levels);

// DICE `rl_data` JSON (a JSON array, or JSONL): end-to-end records {idx, level, pytorch_code,
// cuda_code} -> id "dice_L<level>_<idx>"; infilling records {id, pytorch_code, cuda_code, prefix,
// middle, suffix} -> id "dice_infill_<id>" with infill {prefix, suffix}. prefix + middle + suffix
// must equal cuda_code (checked); cuda_code is kept as the solution. Difficulty = level + i / n in
// file order within a level (infilling records without a level count as level 1).
std::vector<Task> import_dice_rl(const std::string& path);

// CuKe / alpaca JSON (array or JSONL): records {instruction, input, output} or {prompt, response}.
// Prompt = instruction + "\n" + input (or prompt). The reference is the PyTorch code in the prompt
// (see extract_pytorch_reference); the solution is the first fenced code block of the response (or
// the whole response when it has no fence but defines ModelNew). Records with no reference are
// skipped, counted in *skipped. id "cuke_<index in file>", level from a "level" key or 1,
// difficulty = level + i / n.
std::vector<Task> import_cuke(const std::string& path, int* skipped = nullptr);

// The rule used for CuKe prompts: among the fenced code blocks of `prompt`, the first one that
// defines `class Model(` and `get_inputs`; else the first that defines `class Model(`; with no
// fenced block at all, the text from the first line starting with "import" or "from" to the end,
// if it defines `class Model(`. Returns "" when none applies.
std::string extract_pytorch_reference(const std::string& prompt);

}  // namespace dice::judge
