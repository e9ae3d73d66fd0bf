// fatal(): the single handler every failed check reaches.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

namespace {
char g_identity[256];

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_crash(int sig) {
  // Async-signal-safe only: write(2) and backtrace_symbols_fd (libgcc is loaded at install time).
  write_str("\n");
  write_str(g_identity);
  write_str(" fatal signal: ");
  write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT");
  write_str("; backtrace (addr2line -e <binary> <offset> names the lines):\n");
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

void refresh_crash_identity() { std::snprintf(g_identity, sizeof g_identity, "%s", log::identity().c_str()); }

void install_crash_handler() {
  refresh_crash_identity();
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not inside the handler
  static char stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = stack;
  ss.ss_size = sizeof stack;
  sigaltstack(&ss, nullptr);  // a stack overflow still gets its report
  struct sigaction sa{};
  sa.sa_handler = on_crash;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace dice
