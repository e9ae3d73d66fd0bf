#pragma once
// Where dice finds what it reads at run time besides its inputs: the judge's harness
// (src/judge/python), configs/ (tasks, prompts, model presets), tools/ (plot scripts) and data/qwen3.
#include <string>

namespace dice::util {

// The first of: $DICE_HOME; the install prefix's share/dice beside the running binary
// (<prefix>/bin/dice -> <prefix>/share/dice, as `cmake --install` lays it out); the source tree the
// binary was built from; ".". Each candidate counts only where it holds src/judge/python/runner.py.
std::string home_dir();
// Which of those home_dir() is: "DICE_HOME", "install", "source tree" or "current directory".
std::string home_origin();

// `p` as given when it is empty, absolute or exists from here; else home_dir()/p where that exists.
std::string in_home(const std::string& p);

}  // namespace dice::util
