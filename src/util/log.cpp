// Rank-aware logging and the progress bar.
#include "dice/util/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>

#include "dice/util/error.h"
#include "dice/util/timer.h"

namespace dice::log {
namespace {
struct State {
  int rank = 0;
  int world_size = 1;
  std::string role = "main";
  std::string host;
  Level level = Level::kInfo;
  bool all_ranks = false;
  std::ofstream file;  // set_file
  std::mutex mu;
};
State& state() {
  static State s;
  if (s.host.empty()) {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    s.host = buf;
  }
  return s;
}
}  // namespace

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

std::string format_duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

std::string eta(double elapsed_s, long done, long total) {
  if (done <= 0 || total <= done) return total <= done && done > 0 ? "ETA 0s" : "";
  return "ETA " + format_duration(elapsed_s / static_cast<double>(done) * static_cast<double>(total - done));
}

void set_identity(int rank, int world_size, const std::string& role) {
  auto& s = state();
  s.rank = rank;
  s.world_size = world_size;
  s.role = role;
  refresh_crash_identity();
}
void set_level(Level level) { state().level = level; }

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  throw Error(str("--log-level is '", name, "', but must be debug, info, warn or error."));
}

void set_file(const std::string& path) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file.is_open()) s.file.close();
  if (path.empty()) return;
  s.file.open(path, std::ios::app);
  DICE_REQUIRE(s.file.is_open(), "Could not open the log file ", path, ".");
}
void set_all_ranks(bool all) { state().all_ranks = all; }
int rank() { return state().rank; }
const std::string& role() { return state().role; }
const std::string& host() { return state().host; }
std::string identity() {
  auto& s = state();
  return str("[r", s.rank, " ", s.role, " ", s.host, "]");
}

void write(Level level, const std::string& msg) {
  auto& s = state();
  if (level < s.level) return;
  if (level <= Level::kInfo && s.rank != 0 && !s.all_ranks) return;
  std::lock_guard<std::mutex> lock(s.mu);
  const char* tag = level == Level::kDebug ? "debug: " : level == Level::kWarn ? "warning: "
                    : level == Level::kError ? "error: " : "";
  if (level >= Level::kWarn || (s.world_size > 1 && s.all_ranks))
    std::fprintf(stderr, "%s %s%s\n", identity().c_str(), tag, msg.c_str());
  else
    std::fprintf(level >= Level::kWarn ? stderr : stdout, "%s%s\n", tag, msg.c_str());
  std::fflush(level >= Level::kWarn ? stderr : stdout);
  if (s.file.is_open()) {
    char stamp[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    s.file << stamp << " " << (level >= Level::kWarn ? identity() + " " : std::string()) << tag << msg << "\n";
    s.file.flush();
  }
}

Progress::Progress(std::string label, long total)
    : label_(std::move(label)), total_(total), start_s_(now_s()), tty_(isatty(2) != 0) {}

void Progress::update(long done) {
  if (rank() != 0) return;
  double t = now_s();
  bool last = done >= total_;
  // On a terminal redraw at most 10x/s; in a log file print a line every 10 s.
  if (!last && last_print_s_ >= 0 && t - last_print_s_ < (tty_ ? 0.1 : 10.0)) return;
  last_print_s_ = t;
  double frac = total_ > 0 ? static_cast<double>(done) / total_ : 1.0;
  double elapsed = t - start_s_;
  double eta = done > 0 ? elapsed * (total_ - done) / done : -1;
  const int width = 24;
  std::string bar(width, '.');
  for (int i = 0; i < static_cast<int>(frac * width) && i < width; ++i) bar[i] = '#';
  std::fprintf(stderr, "%s%s %ld/%ld [%s] %3d%% %s %s%s", tty_ ? "\r" : "", label_.c_str(), done, total_,
               bar.c_str(), static_cast<int>(frac * 100), last ? "took" : "ETA",
               format_duration(last ? elapsed : eta).c_str(), tty_ && !last ? "" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  if (last_print_s_ < 0 || tty_) update(total_);
}

}  // namespace dice::log
