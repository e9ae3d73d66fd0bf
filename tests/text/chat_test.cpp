// Chat framing and code-block extraction.
#include <gtest/gtest.h>

#include "dice/text/chat.h"
#include "dice/text/tokenizer.h"
#include "dice/util/fs.h"

using dice::text::extract_code_block;

TEST(Chat, PromptFraming) {
  EXPECT_EQ(dice::text::chat_prompt("Write a kernel."),
            "<|im_start|>user\nWrite a kernel.<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(dice::text::chat_prompt(""), "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Chat, PromptTokenizesWithSpecialIds) {
  auto tok = dice::text::Tokenizer::from_dir(std::string(DICE_DATA_DIR) + "/qwen3");
  auto ids = tok.encode(dice::text::chat_prompt("hi"));
  // <|im_start|> user \n hi <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(ids, (std::vector<int32_t>{151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198}));
}

TEST(CodeBlock, FirstFencedBlock) {
  auto b = extract_code_block("Here you go:\n```python\nimport torch\nx = 1\n```\nand\n```cpp\nint y;\n```\n");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->language, "python");
  EXPECT_EQ(b->code, "import torch\nx = 1\n");
  EXPECT_TRUE(b->closed);

  b = extract_code_block("```CPP  extra words\nint main() {}\n```");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->language, "cpp");
  EXPECT_EQ(b->code, "int main() {}\n");

  b = extract_code_block("```\nplain\n```");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->language, "");
  EXPECT_EQ(b->code, "plain\n");
}

TEST(CodeBlock, KeepsIndentationAndInnerBackticks) {
  auto b = extract_code_block("  ```python\n    def f():\n        return '``'\n  ```\n");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->code, "    def f():\n        return '``'\n");
  EXPECT_TRUE(b->closed);
}

TEST(CodeBlock, TruncatedAnswer) {
  auto b = extract_code_block("Sure.\n```python\nimport torch\nclass ModelNew:\n    pass");
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->closed);
  EXPECT_EQ(b->code, "import torch\nclass ModelNew:\n    pass\n");

  b = extract_code_block("```python\nx = 1\n``");  // the closing fence itself was cut
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->closed);
  EXPECT_EQ(b->code, "x = 1\n");
}

TEST(CodeBlock, InlineFences) {
  auto b = extract_code_block("Code: ```python\nx = 1```");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->language, "python");
  EXPECT_EQ(b->code, "x = 1\n");
  EXPECT_TRUE(b->closed);
}

TEST(CodeBlock, NoneWhenAbsentOrEmpty) {
  EXPECT_FALSE(extract_code_block("no code here").has_value());
  EXPECT_FALSE(extract_code_block("").has_value());
  EXPECT_FALSE(extract_code_block("```python").has_value());
  EXPECT_FALSE(extract_code_block("```python\n\n   \n```").has_value());
  EXPECT_FALSE(extract_code_block("`inline` only").has_value());
}

TEST(CodeBlock, EveryBlockInOrderByTheSameRules) {
  const std::string text =
      "Model:\n```python\nclass Model:\n    pass\n```\nEmpty:\n```\n   \n```\nCode:\n```cpp\nint y;\n   ```\n"
      "  ```python\nclass ModelNew:\n    pass";
  auto all = dice::text::code_blocks(text);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].code, "class Model:\n    pass\n");
  EXPECT_EQ(all[0].language, "python");
  EXPECT_EQ(all[1].code, "int y;\n");  // the block of blanks was skipped
  EXPECT_EQ(all[1].language, "cpp");
  EXPECT_EQ(all[2].code, "class ModelNew:\n    pass\n");
  EXPECT_FALSE(all[2].closed);  // the text ended inside it
  // the first of them is the one the judge takes
  auto first = extract_code_block(text);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->code, all[0].code);
  EXPECT_TRUE(dice::text::code_blocks("no fences").empty());
  EXPECT_TRUE(dice::text::code_blocks("```python").empty());
}
