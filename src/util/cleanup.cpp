// Scratch removal on signals (see dice/util/cleanup.h).
#include "dice/util/cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>

#include <atomic>
#include <cstring>

namespace dice::cleanup {
namespace {

constexpr int kSlots = 64;
constexpr size_t kPathBytes = 512;

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 registered
  char path[kPathBytes];
};
Slot g_slots[kSlots];

constexpr int kProcs = 256;
std::atomic<int> g_procs[kProcs];  // 0 free, > 0 a child's pid (its process group)

struct linux_dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Removes everything below the directory `fd` (closed on return); depth-limited recursion.
void remove_below(int fd, int depth) {
  if (depth > 64) { ::close(fd); return; }
  alignas(8) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    bool removed_any = false;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<linux_dirent64*>(buf + off);
      off += d->d_reclen;
      if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
      if (::unlinkat(fd, d->d_name, 0) == 0) { removed_any = true; continue; }
      int sub = ::openat(fd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) remove_below(sub, depth + 1);
      if (::unlinkat(fd, d->d_name, AT_REMOVEDIR) == 0) removed_any = true;
    }
    if (removed_any) ::lseek(fd, 0, SEEK_SET);  // entries moved: read the directory again
  }
  ::close(fd);
}

void remove_path(const char* p) {
  if (::unlink(p) == 0) return;
  int fd = ::open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  remove_below(fd, 0);
  ::rmdir(p);
}

std::atomic<bool> g_shutting_down{false};

void on_signal(int sig) {
  g_shutting_down.store(true, std::memory_order_seq_cst);  // before any child dies of what follows
  // children first (whole groups: a sandbox's pid-namespace init and what it runs), then wait
  // for them, so that no write lands after the removal below
  for (auto& p : g_procs) {
    const int pid = p.load(std::memory_order_acquire);
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  }
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (int waited = 0; waited < 200; ++waited) {  // 2 s at most
    bool left = false;
    for (auto& p : g_procs) {
      const int pid = p.load(std::memory_order_acquire);
      if (pid <= 0) continue;
      int st = 0;
      const pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == 0) left = true;
      else p.store(0, std::memory_order_release);  // reaped, or not ours to wait for
    }
    if (!left) break;
    ::nanosleep(&tick, nullptr);
  }
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) remove_path(s.path);
  ::signal(sig, SIG_DFL);  // then end the way the signal would have ended us
  ::raise(sig);
}

}  // namespace

int register_path(const std::string& path) {
  if (path.empty() || path.size() >= kPathBytes) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_path(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0, std::memory_order_release);
}

int register_process(int pid) {
  if (pid <= 0) return -1;
  for (int i = 0; i < kProcs; ++i) {
    int expected = 0;
    if (g_procs[i].compare_exchange_strong(expected, pid)) return i;
  }
  return -1;
}

void unregister_process(int slot) {
  if (slot >= 0 && slot < kProcs) g_procs[slot].store(0, std::memory_order_release);
}

bool shutting_down() { return g_shutting_down.load(std::memory_order_seq_cst); }

void park() {
  for (;;) ::pause();
}

void install_signal_cleanup() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. nohup: keep ignoring
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace dice::cleanup
