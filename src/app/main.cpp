// The `dice` executable: CLI11 front end over the subcommands registered in src/app/cmd_*.cpp.
// User-caused errors (dice::Error) print one sentence and exit 2; no stack traces.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "dice/util/cleanup.h"
#include "dice/util/error.h"
#include "dice/util/home.h"
#include "dice/util/log.h"
#include "subcommand.h"

namespace dice::app {
std::vector<Subcommand>& subcommands() {
  static std::vector<Subcommand> s;
  return s;
}
}  // namespace dice::app

namespace {

// `--log-level LEVEL` (or `--log-level=LEVEL`) anywhere on the command line, for every command:
// taken out of argv before CLI11 sees it. False (after printing why) on a bad level.
bool take_log_level(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], level;
    if (a == "--log-level") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dice: error: --log-level needs a value (debug, info, warn or error).\n");
        return false;
      }
      level = argv[++i];
    } else if (a.rfind("--log-level=", 0) == 0) {
      level = a.substr(12);
    } else {
      argv[out++] = argv[i];
      continue;
    }
    try {
      dice::log::set_level(dice::log::parse_level(level));
    } catch (const dice::Error& e) {
      std::fprintf(stderr, "dice: error: %s\n", e.what());
      return false;
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return true;
}

// Freed memory stays with the process: glibc would hand every block above its mmap threshold
// (32 MiB at most, less than one fp32 copy of a 151,936-word embedding) back to the kernel on free
// and fault it in page by page on the next step. On CPU that was 88 % of a tiny model's SFT step
// (1.4 s -> 0.16 s per step, the same numbers). DICE_MALLOC=system, or any MALLOC_MMAP_MAX_ /
// MALLOC_TRIM_THRESHOLD_ of the user's, keeps glibc's own behaviour.
void keep_freed_memory() {
  const char* choice = std::getenv("DICE_MALLOC");
  if ((choice != nullptr && std::string(choice) == "system") || std::getenv("MALLOC_MMAP_MAX_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return;
  mallopt(M_MMAP_MAX, 0);         // large blocks come from the heap, not from fresh mmaps
  mallopt(M_TRIM_THRESHOLD, -1);  // ... and the heap is never trimmed (-1: glibc's "off")
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  dice::install_crash_handler();
  if (!take_log_level(argc, argv)) return 2;
  dice::cleanup::install_signal_cleanup();  // registered scratch is removed on SIGINT/SIGTERM/SIGHUP
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // tables and reports reach a log line by line
  CLI::App app{"dice: RL for diffusion language models that write CUDA kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(dice::app::version_text()) + "\nharness, configs, tools: " +
                                        dice::util::home_dir() + " (" + dice::util::home_origin() + ")");
  app.footer("Every command also takes --log-level debug|info|warn|error (default info).");
  auto subs = dice::app::subcommands();
  std::sort(subs.begin(), subs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& s : subs) s.setup(*app.add_subcommand(s.name, s.description));
  // A mistyped command gets its own sentence (CLI11 would say "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto& s : subs) {
      known = known || s.name == argv[1];
      names += (names.empty() ? "" : ", ") + s.name;
    }
    if (!known) {
      std::fprintf(stderr, "dice: error: '%s' is not a dice command (commands: %s; see dice --help).\n", argv[1],
                   names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version, or the error
    return rc == 0 ? 0 : 2;      // a command-line mistake is a user error: rc 2, like dice::Error
  } catch (const dice::Error& e) {
    std::fprintf(stderr, "dice: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dice: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
