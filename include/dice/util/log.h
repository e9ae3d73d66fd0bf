#pragma once
// Rank-aware logging: info from rank 0 only (unless verbose), warnings and errors from any rank
// prefixed "[r3 actor host]". Metrics go to JSONL files, never here.
#include <string>

#include "dice/util/error.h"

namespace dice::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Called once by the process (dist::World does it after MPI init).
void set_identity(int rank, int world_size, const std::string& role);
void set_level(Level level);
// "debug" | "info" | "warn" | "error"; a dice::Error naming the choices otherwise.
Level parse_level(const std::string& name);
// Also appends every line this process logs (what passes the level and rank filters) to `path`,
// each with its UTC time ("2026-12-02T07:15:03Z "); "" stops. A run directory's log.txt.
void set_file(const std::string& path);
void set_all_ranks(bool all);  // info from every rank, not just rank 0
int rank();
const std::string& role();
const std::string& host();
// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "1h02m", "3m05s", "42s" ("?" when negative or absurd).
std::string format_duration(double seconds);
// Time left after `done` of `total` steps took `elapsed` seconds: "ETA 3m05s" ("" before the first).
std::string eta(double elapsed_s, long done, long total);
// "[r3 actor host]" — the prefix used by warnings, errors and fatal().
std::string identity();

void write(Level level, const std::string& msg);

template <typename... Args> void debug(Args&&... a) { write(Level::kDebug, str(std::forward<Args>(a)...)); }
template <typename... Args> void info(Args&&... a) { write(Level::kInfo, str(std::forward<Args>(a)...)); }
template <typename... Args> void warn(Args&&... a) { write(Level::kWarn, str(std::forward<Args>(a)...)); }
template <typename... Args> void error(Args&&... a) { write(Level::kError, str(std::forward<Args>(a)...)); }

// A one-line progress bar on stderr (rank 0, TTY-aware): "judge 12/40 [#####....] 30% ETA 1m05s".
class Progress {
 public:
  Progress(std::string label, long total);
  void update(long done);
  void finish();

 private:
  std::string label_;
  long total_;
  double start_s_;
  double last_print_s_ = -1;
  bool tty_;
};

}  // namespace dice::log
