#pragma once
// SDAR / Qwen chat framing and extraction of the code block from a model's answer.
#include <optional>
#include <string>
#include <string_view>

namespace dice::text {

// One user turn, ready for generation:
//   <|im_start|>user\n{user_text}<|im_end|>\n<|im_start|>assistant\n
std::string chat_prompt(std::string_view user_text);

struct CodeBlock {
  std::string language;  // the fence's info word, lower-cased ("python", "cpp", ""...)
  std::string code;      // the lines between the fences, ending with '\n' unless empty
  bool closed = false;   // false: the answer ended (was truncated) inside the block
};

// The first fenced code block of `answer`, or nullopt when there is none or it holds only
// whitespace. Rules:
//  - Opening fence: the first line whose first non-blank characters are ``` (or, failing that,
//    the first ``` anywhere); the rest of that line is the info string, its first word the
//    language. The code starts on the next line.
//  - Closing fence: the next line whose first non-blank characters are ``` (failing that, the
//    next ``` anywhere, e.g. `return x```).
//  - No closing fence (a truncated answer): the code runs to the end of the answer, minus a
//    dangling partial fence ("`" or "``") on the last line; closed = false.
std::optional<CodeBlock> extract_code_block(std::string_view answer);

}  // namespace dice::text
