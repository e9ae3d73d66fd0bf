// The built-in task sets (configs/tasks/builtin_{cpu,cuda}.jsonl): well-formed, ordered easy -> hard,
// up to date with their source files, and every honest solution passes the static checks that a
// reference-as-candidate fails. (Running the solutions is the judge's test: each build takes ~20 s.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "dice/judge/static_check.h"
#include "dice/judge/task.h"

namespace dice::judge {
namespace {

const std::string kTasks = std::string(DICE_SOURCE_DIR) + "/configs/tasks";

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

class BuiltinSet : public ::testing::TestWithParam<std::string> {};

TEST_P(BuiltinSet, WellFormedAndOrdered) {
  const std::string device = GetParam();
  const auto tasks = load_tasks(kTasks + "/builtin_" + device + ".jsonl");
  ASSERT_GE(tasks.size(), 30u);
  std::set<int> levels;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    SCOPED_TRACE(t.id);
    EXPECT_EQ(t.device, device);
    EXPECT_EQ(t.id.rfind("builtin_" + device + "_", 0), 0u);
    if (i > 0) EXPECT_LE(tasks[i - 1].difficulty, t.difficulty);
    levels.insert(t.level);
    EXPECT_TRUE(has(t.reference, "class Model(nn.Module)"));
    EXPECT_TRUE(has(t.reference, "def get_inputs()"));
    EXPECT_TRUE(has(t.reference, "def get_init_inputs()"));
    // signed, non-constant inputs
    EXPECT_TRUE(has(t.reference, "torch.randn(")) << "inputs should be signed random";
    EXPECT_FALSE(has(t.reference, "torch.rand(")) << "torch.rand inputs are non-negative";
    ASSERT_FALSE(t.solution.empty());
    EXPECT_TRUE(has(t.solution, "load_inline("));
    EXPECT_TRUE(has(t.solution, "class ModelNew(nn.Module)"));
    EXPECT_EQ(has(t.solution, "cuda_sources="), device == "cuda");
    if (device == "cuda") EXPECT_TRUE(has(t.solution, "__global__"));
    if (device == "cpu") EXPECT_TRUE(has(t.solution, "data_ptr<float>()"));
  }
  EXPECT_EQ(levels, (std::set<int>{1, 2, 3}));
  // the first twelve tasks have wrong twins in both forms (issue 22's SFT data)
  size_t twinned = 0;
  for (const Task& t : tasks) twinned += !t.wrong_solutions.empty();
  EXPECT_EQ(twinned, 12u);
}

TEST_P(BuiltinSet, HonestSolutionsPassStaticChecksAndReferencesDoNot) {
  const std::string device = GetParam();
  for (const Task& t : load_tasks(kTasks + "/builtin_" + device + ".jsonl")) {
    SCOPED_TRACE(t.id);
    const auto findings = static_check(t.solution, device, StaticCheckConfig{});
    for (const auto& f : findings) ADD_FAILURE() << f.check << ": " << f.detail;
    // the reference itself, submitted as a candidate, is rejected
    EXPECT_TRUE(has_reject(static_check(t.reference, device, StaticCheckConfig{})));
    // a wrong twin differs from the solution and passes the static checks too: only running it tells
    for (const auto& w : t.wrong_solutions) {
      EXPECT_NE(w.code, t.solution);
      EXPECT_FALSE(w.kind.empty());
      for (const auto& f : static_check(w.code, device, StaticCheckConfig{})) ADD_FAILURE() << w.kind << ": " << f.check;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BuiltinSet, ::testing::Values("cpu", "cuda"));

TEST(Builtin, CpuAndCudaFormsDescribeTheSameTasks) {
  const auto cpu = load_tasks(kTasks + "/builtin_cpu.jsonl");
  const auto cuda = load_tasks(kTasks + "/builtin_cuda.jsonl");
  ASSERT_EQ(cpu.size(), cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(cpu[i].id.substr(12), cuda[i].id.substr(13));  // builtin_cpu_ / builtin_cuda_
    EXPECT_EQ(cpu[i].level, cuda[i].level);
    EXPECT_DOUBLE_EQ(cpu[i].difficulty, cuda[i].difficulty);
    EXPECT_NE(cpu[i].reference, cuda[i].reference) << cpu[i].id << ": the CUDA form should use larger sizes";
  }
}

TEST(Builtin, JsonlIsUpToDateWithTaskFolders) {
  const std::string cmd = std::string(DICE_PYTHON) + " " + DICE_SOURCE_DIR + "/tools/tasks/build_builtin.py --check";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "run tools/tasks/build_builtin.py and commit the JSONL files";
}

}  // namespace
}  // namespace dice::judge
