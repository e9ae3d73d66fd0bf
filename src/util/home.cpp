#include "dice/util/home.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#ifndef DICE_SOURCE_DIR
#define DICE_SOURCE_DIR "."
#endif

namespace dice::util {
namespace {

bool holds_harness(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "src/judge/python/runner.py", ec);
}

std::pair<std::string, std::string> find_home() {
  if (const char* env = std::getenv("DICE_HOME"); env && *env) return {env, "DICE_HOME"};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const auto share = std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path().parent_path() /
                       "share" / "dice";
    if (holds_harness(share)) return {share.lexically_normal().string(), "install"};
  }
  if (holds_harness(DICE_SOURCE_DIR)) return {DICE_SOURCE_DIR, "source tree"};
  return {".", "current directory"};
}

const std::pair<std::string, std::string>& home() {
  static const auto h = find_home();
  return h;
}

}  // namespace

std::string home_dir() { return home().first; }
std::string home_origin() { return home().second; }

std::string in_home(const std::string& p) {
  std::error_code ec;
  if (p.empty() || p[0] == '/' || std::filesystem::exists(p, ec)) return p;
  const auto in = std::filesystem::path(home_dir()) / p;
  return std::filesystem::exists(in, ec) ? in.string() : p;
}

}  // namespace dice::util
