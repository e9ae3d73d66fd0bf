#pragma once
// TaskPrompter: the one place a task becomes the user text of a prompt (before chat framing), for
// the actors, evaluation, SFT's task reader and `dice sample`. The template is the one given, or
// the built-in one for the prompt's kind (infill / end-to-end) and the task's device; templates
// are read once.
//
// And the way back: what an answer to such a prompt puts before the judge (candidate_job), and
// what SFT trains an infill prompt to answer (infill_answer). An infill answer is either
//   file:   the whole file in a fenced code block (DICE: the model repeats prefix and suffix), or
//   middle: only the code between prefix and suffix, as written (fill-in-the-middle); the judge
//           gets prefix + answer + suffix.
#include <map>
#include <optional>
#include <string>

#include "dice/judge/judge.h"
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

// The answer kinds of an infill prompt, as configs name them ("file", "middle").
inline bool is_answer_kind(const std::string& s) { return s == "file" || s == "middle"; }

// The judge's job for one decoded answer. middle (the task must have an infill split): the file
// prefix + answer + suffix; otherwise the answer's first fenced code block (empty: no code).
judge::Job candidate_job(const judge::Task& t, const std::string& answer, bool middle);

// The middle of `code` between the task's infill prefix and suffix, or nullopt when `code` does
// not begin with the prefix and end with the suffix (without overlap).
std::optional<std::string> infill_middle(const judge::Task& t, const std::string& code);

}  // namespace dice::train
