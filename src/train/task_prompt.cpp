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
