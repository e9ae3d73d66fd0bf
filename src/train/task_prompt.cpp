#include "dice/train/task_prompt.h"

#include <utility>

#include "dice/text/prompt.h"
#include "dice/util/error.h"
#include "dice/util/home.h"

namespace dice::train {

TaskPrompter::TaskPrompter(std::string template_path)
    : template_path_(template_path.empty() ? std::string() : util::in_home(template_path)) {}

std::string TaskPrompter::operator()(const judge::Task& t, bool infill) {
  DICE_CHECK(!infill || t.infill.has_value(), "task ", t.id, " has no infill split");
  const auto kind = infill ? text::PromptKind::kInfill : text::PromptKind::kEndToEnd;
  const auto dev = t.device == "cpu" ? text::PromptDevice::kCpu : text::PromptDevice::kCuda;
  const std::string path =
      template_path_.empty() ? util::home_dir() + "/" + text::default_prompt_template(kind, dev) : template_path_;
  auto it = templates_.find(path);
  if (it == templates_.end()) it = templates_.emplace(path, text::load_prompt_template(path)).first;
  return infill ? text::infill_prompt(it->second, t.reference, t.infill->prefix, t.infill->suffix)
                : text::end_to_end_prompt(it->second, t.reference);
}

}  // namespace dice::train

namespace dice::train {

judge::Job candidate_job(const judge::Task& t, const std::string& answer, bool middle) {
  if (!middle) return {&t, judge::extract_candidate_code(answer), true};
  DICE_CHECK(t.infill.has_value(), "task ", t.id, " has no infill split for a middle answer");
  return {&t, t.infill->prefix + answer + t.infill->suffix, true};
}

std::optional<std::string> infill_middle(const judge::Task& t, const std::string& code) {
  if (!t.infill) return std::nullopt;
  const auto& [prefix, suffix] = *t.infill;
  if (code.size() < prefix.size() + suffix.size() || code.compare(0, prefix.size(), prefix) != 0 ||
      code.compare(code.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  return code.substr(prefix.size(), code.size() - prefix.size() - suffix.size());
}

}  // namespace dice::train
