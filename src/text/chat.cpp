// Chat framing and code-block extraction (rules in chat.h).
#include "dice/text/chat.h"

#include <cctype>
#include <utility>

namespace dice::text {
namespace {

bool blank(char c) { return c == ' ' || c == '\t'; }

// Offset of the first ``` that begins a line (after blanks) at or after `from`, else npos.
size_t fence_at_line_start(std::string_view s, size_t from) {
  for (size_t p = s.find("```", from); p != std::string_view::npos; p = s.find("```", p + 1)) {
    size_t q = p;
    while (q > 0 && blank(s[q - 1])) --q;
    if (q == 0 || s[q - 1] == '\n') return p;
  }
  return std::string_view::npos;
}

}  // namespace

std::string chat_prompt(std::string_view user_text) {
  std::string out;
  out.reserve(user_text.size() + 64);
  out += "<|im_start|>user\n";
  out += user_text;
  out += "<|im_end|>\n<|im_start|>assistant\n";
  return out;
}

namespace {

// The block whose opening fence is the first at or after `from` (extract_code_block's rules);
// `next`: where the text after its closing fence starts (npos: no fence, or the text ended inside).
std::optional<CodeBlock> block_from(std::string_view s, size_t from, size_t& next) {
  next = std::string_view::npos;
  size_t open = fence_at_line_start(s, from);
  if (open == std::string_view::npos) open = s.find("```", from);
  if (open == std::string_view::npos) return std::nullopt;

  CodeBlock block;
  size_t info = open + 3;
  while (info < s.size() && s[info] == '`') ++info;  // ```` fences
  size_t eol = s.find('\n', info);
  std::string_view info_line = s.substr(info, (eol == std::string_view::npos ? s.size() : eol) - info);
  size_t w = 0;
  while (w < info_line.size() && blank(info_line[w])) ++w;
  while (w < info_line.size() && !std::isspace(static_cast<unsigned char>(info_line[w])) && info_line[w] != '`')
    block.language.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(info_line[w++]))));
  if (eol == std::string_view::npos) return std::nullopt;  // nothing after the opening fence
  size_t start = eol + 1;

  size_t close = fence_at_line_start(s, start);
  if (close == std::string_view::npos) close = s.find("```", start);
  std::string_view code;
  if (close != std::string_view::npos) {
    code = s.substr(start, close - start);
    block.closed = true;
    next = close + 3;
  } else {
    code = s.substr(start);
    // A truncated closing fence: drop a last line made only of blanks and one or two backticks.
    size_t last = code.rfind('\n');
    size_t ls = last == std::string_view::npos ? 0 : last + 1;
    std::string_view tail = code.substr(ls);
    size_t k = 0;
    while (k < tail.size() && blank(tail[k])) ++k;
    if (k < tail.size() && tail.find_first_not_of('`', k) == std::string_view::npos && tail.size() - k <= 2)
      code = code.substr(0, ls);
  }
  // Keep the code's own indentation; drop the blanks before a closing fence on its line.
  if (block.closed) {
    size_t e = code.size();
    while (e > 0 && blank(code[e - 1])) --e;
    code = code.substr(0, e);
  }
  if (code.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::nullopt;
  block.code = std::string(code);
  if (block.code.back() != '\n') block.code.push_back('\n');
  return block;
}

}  // namespace

std::optional<CodeBlock> extract_code_block(std::string_view s) {
  size_t next;
  return block_from(s, 0, next);
}

std::vector<CodeBlock> code_blocks(std::string_view s) {
  std::vector<CodeBlock> out;
  size_t from = 0;
  while (from != std::string_view::npos && from < s.size()) {
    size_t next;
    auto b = block_from(s, from, next);
    if (b) out.push_back(std::move(*b));
    if (next == std::string_view::npos) break;  // no fence left, or a block the text ended inside
    from = next;  // (a block of blanks only is skipped)
  }
  return out;
}

}  // namespace dice::text
