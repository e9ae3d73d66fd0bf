// Task store (JSONL) and importers: KernelBench checkout, DICE rl_data, CuKe / alpaca.
#include "dice/judge/task.h"

#include <gtest/gtest.h>

#include <string>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::judge {
namespace {

const std::string kFixtures = std::string(DICE_SOURCE_DIR) + "/tests/judge/fixtures";

std::string temp_file(const std::string& name, const std::string& text) {
  static const std::string dir = fs::make_temp_dir("dice_task_test");
  const std::string path = dir + "/" + name;
  fs::write_file(path, text);
  return path;
}

// Expects load_tasks to throw an error whose message contains every fragment.
void expect_load_error(const std::string& jsonl, std::initializer_list<const char*> fragments) {
  const std::string path = temp_file("bad.jsonl", jsonl);
  try {
    load_tasks(path);
    FAIL() << "no error for: " << jsonl;
  } catch (const Error& e) {
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(TaskStore, RoundTripKeepsEveryField) {
  Task a;
  a.id = "t1";
  a.level = 2;
  a.difficulty = 1.25;
  a.reference = "class Model:\n  pass\n\"quoted\" \\ \t unicode: \xc3\xa9";
  a.solution = "class ModelNew: pass";
  a.infill = Infill{"PRE\n", "\nSUF"};
  a.device = "cpu";
  a.wrong_solutions = {{"off_by_one", "class ModelNew: wrong"}, {"wrong_constant", "class ModelNew: 2"}};
  Task b;
  b.id = "t2";
  b.reference = "r";
  const std::string path = temp_file("rt.jsonl", "");
  save_tasks(path, {a, b});
  const auto got = load_tasks(path);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, "t1");
  EXPECT_EQ(got[0].level, 2);
  EXPECT_DOUBLE_EQ(got[0].difficulty, 1.25);
  EXPECT_EQ(got[0].reference, a.reference);
  EXPECT_EQ(got[0].solution, a.solution);
  ASSERT_TRUE(got[0].infill.has_value());
  EXPECT_EQ(got[0].infill->prefix, "PRE\n");
  EXPECT_EQ(got[0].infill->suffix, "\nSUF");
  EXPECT_EQ(got[0].device, "cpu");
  ASSERT_EQ(got[0].wrong_solutions.size(), 2u);
  EXPECT_EQ(got[0].wrong_solutions[1].kind, "wrong_constant");
  EXPECT_EQ(got[0].wrong_solutions[1].code, "class ModelNew: 2");
  EXPECT_TRUE(got[1].wrong_solutions.empty());
  EXPECT_FALSE(got[1].infill.has_value());
  EXPECT_EQ(got[1].solution, "");
  EXPECT_EQ(got[1].device, "cuda");
  // one line per task, key order as documented
  const std::string text = fs::read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(text.rfind("{\"id\":\"t1\",\"level\":2,\"difficulty\":1.25,\"reference\":", 0), 0u);
}

TEST(TaskStore, BlankLinesAreSkipped) {
  const std::string path = temp_file(
      "blank.jsonl", "\n{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n\n   \n"
                     "{\"id\":\"b\",\"level\":0,\"difficulty\":0.5,\"reference\":\"r\",\"device\":\"cpu\"}\n");
  const auto t = load_tasks(path);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].id, "b");
  EXPECT_EQ(t[1].level, 0);
}

TEST(TaskStore, ErrorsNameFileLineAndField) {
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n{\"id\":\"b\",\"level\":\"x\","
                    "\"difficulty\":0,\"reference\":\"r\"}\n",
                    {"bad.jsonl:2", "'level'", "integer"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"reference\":\"r\"}\n", {"bad.jsonl:1", "'difficulty'"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0}\n", {"bad.jsonl:1", "'reference'"});
  expect_load_error("{\"id\":\"\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n", {"'id'", "empty"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\",\"device\":\"tpu\"}\n",
                    {"bad.jsonl:1", "'device'", "tpu"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\",\"infill\":{\"prefix\":\"p\"}}\n",
                    {"bad.jsonl:1", "'suffix'"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\",\"colour\":1}\n",
                    {"bad.jsonl:1", "unknown field 'colour'"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\nnot json\n", {"bad.jsonl:2", "JSON"});
  expect_load_error("[1,2]\n", {"bad.jsonl:1", "object"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\",\"wrong_solutions\":{}}\n",
                    {"bad.jsonl:1", "'wrong_solutions'", "array"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\",\"solution\":\"s\","
                    "\"wrong_solutions\":[{\"kind\":\"k\",\"code\":\"s\"}]}\n",
                    {"bad.jsonl:1", "wrong_solutions[0]", "the solution itself"});
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\","
                    "\"wrong_solutions\":[{\"kind\":\"k\",\"text\":\"x\"}]}\n",
                    {"bad.jsonl:1", "unknown field 'text'"});
}

TEST(TaskStore, DuplicateIdsAreRejected) {
  expect_load_error("{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n"
                    "{\"id\":\"b\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n"
                    "{\"id\":\"a\",\"level\":1,\"difficulty\":0,\"reference\":\"r\"}\n",
                    {"bad.jsonl:3", "duplicate task id 'a'", "line 1"});
  Task t;
  t.id = "same";
  t.reference = "r";
  EXPECT_THROW(save_tasks(temp_file("dup.jsonl", ""), {t, t}), Error);
}

TEST(TaskStore, MissingFileIsAnError) {
  EXPECT_THROW(load_tasks("/nonexistent/dir/tasks.jsonl"), Error);
}

TEST(TaskImport, KernelBenchSortsByNumericPrefix) {
  const auto tasks = import_kernelbench(kFixtures + "/kernelbench", {1, 2});
  ASSERT_EQ(tasks.size(), 4u);  // README.md is skipped
  EXPECT_EQ(tasks[0].id, "kb_L1_1_Square");
  EXPECT_EQ(tasks[1].id, "kb_L1_2_Scale");
  EXPECT_EQ(tasks[2].id, "kb_L1_10_Negate");  // numeric, not lexicographic, order
  EXPECT_EQ(tasks[3].id, "kb_L2_1_Linear_Tanh");
  EXPECT_DOUBLE_EQ(tasks[0].difficulty, 1.0);
  EXPECT_NEAR(tasks[1].difficulty, 1.0 + 1.0 / 3, 1e-12);
  EXPECT_NEAR(tasks[2].difficulty, 1.0 + 2.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(tasks[3].difficulty, 2.0);
  EXPECT_EQ(tasks[3].level, 2);
  EXPECT_NE(tasks[3].reference.find("nn.Linear(k, m)"), std::string::npos);
  EXPECT_EQ(tasks[0].device, "cuda");
  // the KernelBench/ folder itself works too
  EXPECT_EQ(import_kernelbench(kFixtures + "/kernelbench/KernelBench", {2}).size(), 1u);
  // a missing level names the folder
  try {
    import_kernelbench(kFixtures + "/kernelbench", {3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("level3"), std::string::npos) << e.what();
  }
}

TEST(TaskImport, DiceRlEndToEndAndInfill) {
  const auto e2e = import_dice_rl(kFixtures + "/dice_rl_e2e.json");
  ASSERT_EQ(e2e.size(), 3u);
  EXPECT_EQ(e2e[0].id, "dice_L1_7");
  EXPECT_EQ(e2e[1].id, "dice_L2_3");
  EXPECT_EQ(e2e[2].id, "dice_L1_9");
  EXPECT_DOUBLE_EQ(e2e[0].difficulty, 1.0);
  EXPECT_DOUBLE_EQ(e2e[2].difficulty, 1.5);  // second of two level-1 records
  EXPECT_DOUBLE_EQ(e2e[1].difficulty, 2.0);
  EXPECT_NE(e2e[1].reference.find("x - 1"), std::string::npos);
  EXPECT_NE(e2e[0].solution.find("class ModelNew"), std::string::npos);
  EXPECT_FALSE(e2e[0].infill.has_value());

  const auto inf = import_dice_rl(kFixtures + "/dice_rl_infill.jsonl");
  ASSERT_EQ(inf.size(), 1u);
  EXPECT_EQ(inf[0].id, "dice_infill_relu_a");
  ASSERT_TRUE(inf[0].infill.has_value());
  EXPECT_EQ(inf[0].infill->prefix, inf[0].solution.substr(0, 40));
  EXPECT_EQ(inf[0].infill->suffix, inf[0].solution.substr(90));

  try {
    import_dice_rl(kFixtures + "/dice_rl_bad_split.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dice_rl_bad_split.json[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prefix + middle + suffix"), std::string::npos) << e.what();
  }
}

TEST(TaskImport, CukeAlpacaTakesReferenceFromPromptAndFirstBlockOfResponse) {
  int skipped = -1;
  const auto t = import_cuke(kFixtures + "/cuke_alpaca.json", &skipped);
  EXPECT_EQ(skipped, 1);  // the prose-only prompt
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].id, "cuke_0");
  EXPECT_EQ(t[1].id, "cuke_2");
  EXPECT_EQ(t[2].id, "cuke_3");
  EXPECT_EQ(t[0].reference.rfind("import torch", 0), 0u);
  EXPECT_NE(t[0].reference.find("get_inputs"), std::string::npos);
  EXPECT_EQ(t[0].solution.rfind("import torch", 0), 0u);
  EXPECT_EQ(t[0].solution.find("Done."), std::string::npos);
  // no fence in the prompt: from the first import line on; no fence in the response: the whole response
  EXPECT_EQ(t[1].reference.rfind("import torch", 0), 0u);
  EXPECT_NE(t[1].solution.find("class ModelNew"), std::string::npos);
  // the block defining Model wins over an earlier helper block; the response's FIRST block is kept
  EXPECT_NE(t[2].reference.find("x + 2"), std::string::npos);
  EXPECT_EQ(t[2].solution, "// kernel\n");
  EXPECT_LT(t[0].difficulty, t[1].difficulty);
}

TEST(TaskImport, ReferenceRule) {
  EXPECT_EQ(extract_pytorch_reference("no code at all"), "");
  EXPECT_EQ(extract_pytorch_reference("```\nclass Model(nn.Module): pass\n```"), "class Model(nn.Module): pass\n");
  EXPECT_EQ(extract_pytorch_reference("```\nprint(1)\n```\nimport torch\nclass Model(x): pass"), "");
}

TEST(TaskImport, ImportedSetsSaveAndReload) {
  const auto tasks = import_kernelbench(kFixtures + "/kernelbench", {1});
  const std::string path = temp_file("kb.jsonl", "");
  save_tasks(path, tasks);
  const auto back = load_tasks(path);
  ASSERT_EQ(back.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(back[i].id, tasks[i].id);
    EXPECT_EQ(back[i].reference, tasks[i].reference);
    EXPECT_DOUBLE_EQ(back[i].difficulty, tasks[i].difficulty);
  }
}

}  // namespace
}  // namespace dice::judge
