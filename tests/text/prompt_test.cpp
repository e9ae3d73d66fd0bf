// Prompt templates: rendering rules and the project's templates under configs/prompts/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "dice/text/chat.h"
#include "dice/text/prompt.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

using namespace dice::text;

namespace {
const std::string kRoot = DICE_SOURCE_DIR;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dice::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Prompt, RenderSubstitutesVerbatim) {
  EXPECT_EQ(render_prompt("A {x} B {y_2} {x}", {{"x", "1"}, {"y_2", "{x}"}}), "A 1 B {x} 1");
  // Braces that are not {identifier} are literal (C++ and Python code in templates).
  EXPECT_EQ(render_prompt("int f() { return {}; } d = {'a': 1} {1x} {x y}", {}),
            "int f() { return {}; } d = {'a': 1} {1x} {x y}");
  EXPECT_EQ(prompt_placeholders("{a} {b} {a} { c } {_d}"), (std::vector<std::string>{"a", "b", "_d"}));
}

TEST(Prompt, UnknownPlaceholderIsAnError) {
  std::string err = error_of([] { render_prompt("see {refrence}", {{"reference", "r"}}, "my.txt"); });
  EXPECT_NE(err.find("my.txt"), std::string::npos) << err;
  EXPECT_NE(err.find("{refrence}"), std::string::npos) << err;
  EXPECT_NE(err.find("{reference}"), std::string::npos) << err;
}

TEST(Prompt, LoadErrors) {
  EXPECT_NE(error_of([] { load_prompt_template("/nonexistent/t.txt"); }).find("does not exist"), std::string::npos);
  std::string dir = dice::fs::make_temp_dir("dice-prompt");
  dice::fs::write_file(dir + "/empty.txt", " \n");
  EXPECT_NE(error_of([&] { load_prompt_template(dir + "/empty.txt"); }).find("is empty"), std::string::npos);
}

TEST(Prompt, ProjectTemplatesUseExactlyTheirPlaceholders) {
  for (auto device : {PromptDevice::kCuda, PromptDevice::kCpu}) {
    std::string e2e = load_prompt_template(kRoot + "/" + default_prompt_template(PromptKind::kEndToEnd, device));
    std::string inf = load_prompt_template(kRoot + "/" + default_prompt_template(PromptKind::kInfill, device));
    EXPECT_EQ(prompt_placeholders(e2e), std::vector<std::string>{"reference"});
    EXPECT_EQ(prompt_placeholders(inf), (std::vector<std::string>{"reference", "prefix", "suffix"}));

    const std::string ref = "class Model(nn.Module):\n    def forward(self, x):\n        return {x}\n";
    std::string p = end_to_end_prompt(e2e, ref);
    EXPECT_NE(p.find(ref), std::string::npos);
    EXPECT_EQ(p.find("{reference}"), std::string::npos);
    EXPECT_NE(p.find("ModelNew"), std::string::npos);
    EXPECT_NE(p.find("load_inline"), std::string::npos);

    std::string q = infill_prompt(inf, ref, "PREFIX_MARK", "SUFFIX_MARK");
    EXPECT_LT(q.find(ref), q.find("PREFIX_MARK"));
    EXPECT_LT(q.find("PREFIX_MARK"), q.find("SUFFIX_MARK"));
    EXPECT_NE(q.find("ENTIRE file"), std::string::npos);

    bool cpu = device == PromptDevice::kCpu;
    EXPECT_EQ(e2e.find("cuda_sources=") == std::string::npos, cpu);
    EXPECT_EQ(inf.find("__global__") == std::string::npos, cpu);
  }
}

TEST(Prompt, OneShotExamplesAreValidPython) {
  // Every ```python block of the templates (placeholders aside) must parse.
  std::string dir = dice::fs::make_temp_dir("dice-prompt-py");
  int n = 0;
  for (const char* name : {"end_to_end", "infill", "end_to_end_cpu", "infill_cpu"}) {
    for (const auto& b : code_blocks(load_prompt_template(kRoot + "/configs/prompts/" + name + ".txt"))) {
      if (!prompt_placeholders(b.code).empty()) continue;
      std::string f = dir + "/ex" + std::to_string(n++) + ".py";
      dice::fs::write_file(f, b.code);
      std::string cmd = std::string(DICE_PYTHON) + " -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" " + f;
      EXPECT_EQ(std::system(cmd.c_str()), 0) << name << ": example does not parse:\n" << b.code;
    }
  }
  EXPECT_EQ(n, 8);  // a model and its replacement in each of the four templates
}
