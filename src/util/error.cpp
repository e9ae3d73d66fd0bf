// fatal(): the single handler every failed check reaches.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "dice/util/error.h"
#include "dice/util/log.h"

namespace dice {
namespace {
std::vector<AbortHook>& hooks() {
  static std::vector<AbortHook> h;
  return h;
}
std::mutex& hooks_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

void add_abort_hook(AbortHook hook) {
  std::lock_guard<std::mutex> lock(hooks_mu());
  hooks().push_back(hook);
}

void fatal(const char* statement, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "%s FATAL: %s failed at %s:%d%s%s\n", log::identity().c_str(), statement, file, line,
               detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::vector<AbortHook> hs;
  {
    std::lock_guard<std::mutex> lock(hooks_mu());
    hs = hooks();
  }
  for (auto it = hs.rbegin(); it != hs.rend(); ++it) (*it)();
  std::abort();
}

}  // namespace dice
