#pragma once
// SDAR / Qwen chat framing and extraction of the code block from a model's answer.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Every fenced code block of `text`, in order, by the same rules: each search starts after the
// previous block's closing fence; blocks of blanks only are skipped; a block the text ends inside
// is the last. The one fence parser of dice: judged responses, imported prompts and solutions.
std::vector<CodeBlock> code_blocks(std::string_view text);

}  // namespace dice::text
