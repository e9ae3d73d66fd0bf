// Prompt template rendering (syntax in prompt.h).
#include "dice/text/prompt.h"

#include <algorithm>
#include <cctype>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::text {
namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Length of a placeholder "{name}" at t[i], or 0.
size_t placeholder_at(std::string_view t, size_t i) {
  if (t[i] != '{' || i + 2 >= t.size() || !ident_start(t[i + 1])) return 0;
  size_t j = i + 2;
  while (j < t.size() && ident_char(t[j])) ++j;
  return (j < t.size() && t[j] == '}') ? j + 1 - i : 0;
}

}  // namespace

std::vector<std::string> prompt_placeholders(std::string_view t) {
  std::vector<std::string> out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (size_t n = placeholder_at(t, i)) {
      std::string name(t.substr(i + 1, n - 2));
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
      i += n - 1;
    }
  }
  return out;
}

std::string render_prompt(std::string_view t, const PromptVars& vars, const std::string& origin) {
  std::string out;
  out.reserve(t.size() + 4096);
  for (size_t i = 0; i < t.size();) {
    size_t n = placeholder_at(t, i);
    if (n == 0) {
      out.push_back(t[i++]);
      continue;
    }
    std::string name(t.substr(i + 1, n - 2));
    auto it = vars.find(name);
    if (it == vars.end()) {
      std::string known;
      for (auto& [k, v] : vars) known += (known.empty() ? "" : ", ") + ("{" + k + "}");
      DICE_REQUIRE(false, "The ", origin, " uses the placeholder {", name, "}, which has no value (given: ",
                   known.empty() ? "none" : known, ").");
    }
    out += it->second;
    i += n;
  }
  return out;
}

std::string load_prompt_template(const std::string& path) {
  DICE_REQUIRE(fs::exists(path), "Prompt template ", path, " does not exist.");
  std::string t = fs::read_file(path);
  DICE_REQUIRE(t.find_first_not_of(" \t\r\n") != std::string::npos, "Prompt template ", path, " is empty.");
  return t;
}

std::string default_prompt_template(PromptKind kind, PromptDevice device) {
  std::string name = kind == PromptKind::kEndToEnd ? "end_to_end" : "infill";
  if (device == PromptDevice::kCpu) name += "_cpu";
  return "configs/prompts/" + name + ".txt";
}

std::string end_to_end_prompt(std::string_view t, std::string_view reference) {
  return render_prompt(t, {{"reference", std::string(reference)}}, "end-to-end prompt template");
}

std::string infill_prompt(std::string_view t, std::string_view reference, std::string_view prefix,
                          std::string_view suffix) {
  return render_prompt(t,
                       {{"reference", std::string(reference)},
                        {"prefix", std::string(prefix)},
                        {"suffix", std::string(suffix)}},
                       "infill prompt template");
}

}  // namespace dice::text
