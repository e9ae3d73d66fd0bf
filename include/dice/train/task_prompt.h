#pragma once
// TaskPrompter: the one place a task becomes the user text of a prompt (before chat framing), for
// the actors, evaluation, SFT's task reader and `dice sample`. The template is the one given, or
// the built-in one for the prompt's kind (infill / end-to-end) and the task's device; templates
// are read once.
#include <map>
#include <string>

#include "dice/judge/task.h"

namespace dice::train {

class TaskPrompter {
 public:
  // template_path: "" = the built-in templates (configs/prompts/); a relative path not found here
  // is looked up in dice's home (util::in_home).
  explicit TaskPrompter(std::string template_path = "");
  // infill: the task's infill split (it must have one) fills the infill template's holes.
  std::string operator()(const judge::Task& t, bool infill);

 private:
  std::string template_path_;
  std::map<std::string, std::string> templates_;
};

}  // namespace dice::train
