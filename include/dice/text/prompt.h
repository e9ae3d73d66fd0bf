#pragma once
// Prompt templates: plain files (configs/prompts/*.txt by default, or any file a user names)
// with {name} placeholders, rendered from plain strings so this module needs no task types.
//
// Placeholder syntax: `{` identifier `}` with identifier = [A-Za-z_][A-Za-z0-9_]*. Every
// placeholder in the template must be given a value (an unknown one is an error naming it);
// values are inserted verbatim and never re-scanned. Anything else with braces (C++ or Python
// code in a template) is literal text.
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dice::text {

using PromptVars = std::map<std::string, std::string>;

// `origin` names the template in errors (e.g. its path).
std::string render_prompt(std::string_view template_text, const PromptVars& vars,
                          const std::string& origin = "prompt template");

// The placeholders a template uses, in order of first appearance.
std::vector<std::string> prompt_placeholders(std::string_view template_text);

// Reads a template file (dice::Error naming the path when missing or empty).
std::string load_prompt_template(const std::string& path);

enum class PromptKind { kEndToEnd, kInfill };
enum class PromptDevice { kCuda, kCpu };

// The default template for a kind and device, relative to the repository root:
// configs/prompts/{end_to_end,infill}{,_cpu}.txt
std::string default_prompt_template(PromptKind kind, PromptDevice device);

// Convenience renderers: end-to-end uses {reference}; infill uses {reference}, {prefix}, {suffix}.
std::string end_to_end_prompt(std::string_view template_text, std::string_view reference);
std::string infill_prompt(std::string_view template_text, std::string_view reference, std::string_view prefix,
                          std::string_view suffix);

}  // namespace dice::text
