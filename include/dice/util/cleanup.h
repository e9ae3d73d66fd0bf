#pragma once
// Scratch removed on every exit path, signals included. A path registered here (a scratch folder
// or a staging file the process owns) is removed when the process ends on SIGINT, SIGTERM or
// SIGHUP (the `dice` executable installs the handler), after which the signal's default action
// ends the process as before. Normal exits remove their scratch themselves (RAII) and unregister.
//
//   dice::cleanup::ScratchGuard g(dir);   // registers; unregisters on destruction
//
// Removal in the handler uses only async-signal-safe calls (openat, getdents64, unlinkat).
#include <string>

namespace dice::cleanup {

// At most 64 paths at once, each shorter than 512 bytes (longer or extra ones are not covered).
// Returns a slot id (-1 when not covered).
int register_path(const std::string& path);
void unregister_path(int slot);

// Child processes (a dice::proc::Subprocess registers each child it starts: its pid leads the
// child's own session and process group) are killed by the same handler, group and all, and
// reaped (up to 2 s) before any path is removed: nothing a child runs (a sandboxed build, an
// executor) writes into a scratch folder after it is gone. At most 256 at once.
int register_process(int pid);
void unregister_process(int slot);

// Installs the SIGINT/SIGTERM/SIGHUP handler (once; the dice executable calls it from main).
void install_signal_cleanup();

// True from the moment the handler starts (before it kills any child): work that ends after this
// was cut short by our own shutdown, and must not be reported as a result (a build or an
// evaluation whose process the handler killed is not the candidate's failure).
bool shutting_down();
// Blocks the calling thread until the handler ends the process (call only when shutting_down()).
[[noreturn]] void park();

class ScratchGuard {
 public:
  explicit ScratchGuard(const std::string& path) : slot_(register_path(path)) {}
  ~ScratchGuard() { unregister_path(slot_); }
  ScratchGuard(const ScratchGuard&) = delete;
  ScratchGuard& operator=(const ScratchGuard&) = delete;

 private:
  int slot_;
};

}  // namespace dice::cleanup
