#pragma once
// Errors and check macros.
//
// Two kinds of failure:
//  - dice::Error (thrown): anything a user can cause — a missing file, a bad config key, a corrupt
//    checkpoint. The message is a sentence naming the thing and what to do; `dice` prints it
//    without a stack trace. Raise with DICE_REQUIRE(cond, parts...).
//  - fatal (never returns): a broken invariant or a failed CUDA/NCCL/MPI call. Reported with the
//    statement, file:line, rank, role, host and device to one handler, which runs the registered
//    abort hooks (NCCL comm abort, then MPI_Abort) and aborts. Always on, also in Release.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dice {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates its arguments with operator<<.
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void fatal(const char* statement, const char* file, int line, const std::string& detail);

// Hooks run by fatal() before abort, most recent first (e.g. ncclCommAbort, then MPI_Abort).
using AbortHook = void (*)();
void add_abort_hook(AbortHook hook);

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT: print the signal, rank/host identity and a
// backtrace to stderr, then die of the same signal (so exit statuses and core settings hold).
// Installed once by the dice executable; safe to call again.
void install_crash_handler();
void refresh_crash_identity();  // called by log::set_identity

}  // namespace dice

#define DICE_REQUIRE(cond, ...)                              \
  do {                                                       \
    if (!(cond)) throw ::dice::Error(::dice::str(__VA_ARGS__)); \
  } while (0)

#define DICE_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) ::dice::fatal(#cond, __FILE__, __LINE__, ::dice::str("" __VA_ARGS__)); \
  } while (0)

// Generic status check: evaluates `stmt` once; `ok(status)` decides success and
// `describe(status)` turns a failure into text.
#define DICE_CHECK_GEN(stmt, ok, describe)                                         \
  do {                                                                             \
    auto dice_status_ = (stmt);                                                    \
    if (!(ok(dice_status_))) ::dice::fatal(#stmt, __FILE__, __LINE__, describe(dice_status_)); \
  } while (0)
