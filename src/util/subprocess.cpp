// Child processes with pipes, timeouts, process-group kill and an optional namespace sandbox.
#include "dice/util/subprocess.h"

#include "dice/util/cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dice/util/error.h"
#include "dice/util/timer.h"

namespace dice::proc {

int cpus_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus_online();
  return CPU_COUNT(&set);
}

int cpus_online() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string ExitStatus::describe() const {
  if (timed_out) return "timeout";
  if (exited) return str("exit ", code);
  if (signal) return str("signal ", signal, " (", strsignal(signal), ")");
  return "not finished";
}

namespace {

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef PR_SET_NO_NEW_PRIVS
#define PR_SET_NO_NEW_PRIVS 38
#endif

// The raw capset/capget interface (no libcap; <linux/capability.h> is not on every machine).
struct CapHeader {
  uint32_t version = 0x20080522;  // _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
  int pid = 0;
};
struct CapData {
  uint32_t effective = 0, permitted = 0, inheritable = 0;
};

// Kernel-wide knobs under /proc that a process keeping uid 0 could otherwise write (the file
// owner is root): bound read-only over the fresh procfs. The rest of /proc stays writable.
constexpr const char* kProcReadOnly[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
                                         "/proc/fs", "/proc/acpi", "/proc/scsi", "/proc/sysvipc"};
// Device nodes bound into the private /dev (besides every /dev/nvidia*, for CUDA).
constexpr const char* kDevNodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

// --- helpers usable between fork and exec (no allocation) ---

void put(int fd, const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = ::write(fd, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void put_int(int fd, long v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  bool neg = v < 0;
  unsigned long u = neg ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u && i > 1);
  if (neg) buf[--i] = '-';
  put(fd, buf + i);
}

// Status channel child -> parent: "A name\n" applied, "M name\n" missing, "E stage errno\n" fatal.
void applied(int fd, const char* what) { put(fd, "A "); put(fd, what); put(fd, "\n"); }
void missing(int fd, const char* what) { put(fd, "M "); put(fd, what); put(fd, "\n"); }
[[noreturn]] void die(int fd, const char* stage) {
  int e = errno;
  put(fd, "E ");
  put(fd, stage);
  put(fd, " ");
  put_int(fd, e);
  put(fd, "\n");
  _exit(127);
}

bool write_small(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// CLONE_NEWUSER with this process's uid and gid mapped to themselves (setgroups denied first, as
// an unprivileged gid_map requires). False (errno set) when the kernel refused a step.
bool enter_user_namespace(const char* uid_map, const char* gid_map) {
  return unshare(CLONE_NEWUSER) == 0 && write_small("/proc/self/setgroups", "deny") &&
         write_small("/proc/self/uid_map", uid_map) && write_small("/proc/self/gid_map", gid_map);
}

bool under(const char* path, const char* dir) {
  size_t n = strlen(dir);
  if (strncmp(path, dir, n) != 0) return false;
  return path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/');
}

// Everything the child needs, prepared before fork so the child never allocates.
struct ChildPlan {
  std::vector<std::string> argv_s, env_s, writable_s, hidden_s, dev_nodes_s;
  std::string uid_map, gid_map;  // "<uid> <uid> 1\n" for new_user
  std::vector<char*> argv, env;
  std::string exe, cwd;
  SandboxOptions sb;
  bool pipe_stdin = false, result_pipe = false, all_cpus = false;
  int in_r = -1, out_w = -1, err_w = -1, res_w = -1, status_w = -1;
  std::vector<char> mountinfo;  // scratch buffer for /proc/self/mountinfo
};

void set_limit(int res, long v, long hard = 0) {
  if (v <= 0) return;
  struct rlimit rl;
  rl.rlim_cur = static_cast<rlim_t>(v);
  rl.rlim_max = static_cast<rlim_t>(std::max(v, hard));
  setrlimit(res, &rl);
}

bool is_dev_node(const ChildPlan& p, const char* path) {
  for (auto& d : p.dev_nodes_s)
    if (strcmp(d.c_str(), path) == 0) return true;
  return false;
}

// Remounts every mount read-only except the writable paths, /proc and the bound device nodes;
// /dev also nodev with a private /dev. Returns false if "/" stayed writable; dev_ok: /dev went.
bool make_readonly(ChildPlan& p, bool& dev_ok) {
  int fd = ::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = 0;
  while (n + 1 < p.mountinfo.size()) {
    ssize_t r = ::read(fd, p.mountinfo.data() + n, p.mountinfo.size() - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  p.mountinfo[n] = '\0';
  bool root_ok = false;
  char* line = p.mountinfo.data();
  while (line && *line) {
    char* next = strchr(line, '\n');
    if (next) *next++ = '\0';
    // fields: id parent maj:min root mountpoint ...
    char* f = line;
    for (int i = 0; i < 4 && f; ++i) {
      f = strchr(f, ' ');
      if (f) ++f;
    }
    if (f) {
      char* end = strchr(f, ' ');
      if (end) *end = '\0';
      bool keep = strchr(f, '\\') != nullptr;  // escaped names: leave alone
      // /proc stays writable: CUDA's cuInit fails with error 304 under a read-only /proc (seen on
      // the GPU node); its kernel-wide parts were bound read-only before (kProcReadOnly).
      keep = keep || strcmp(f, "/proc") == 0;
      // Device nodes bound into the private /dev keep their own (writable, dev) mount: gVisor
      // refuses to open a device node for writing under a read-only mount, and CUDA opens
      // /dev/nvidia* read-write. Without a private /dev, /dev stays as it is.
      const bool dev = strcmp(f, "/dev") == 0;
      keep = keep || is_dev_node(p, f) || (dev && !p.sb.private_dev);
      for (auto& w : p.writable_s) keep = keep || under(f, w.c_str());
      if (!keep) {
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
        if (dev) flags |= MS_NODEV | MS_NOSUID | MS_NOEXEC;  // only the bound nodes open
        struct statvfs sv;
        if (statvfs(f, &sv) == 0) {
          if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
          if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
          if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
          // inside a user namespace the atime mode of an inherited mount is locked: keep it
          if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
          if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
          if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
          if (!(sv.f_flag & (ST_NOATIME | ST_RELATIME))) flags |= MS_STRICTATIME;
        }
        int rc = mount(nullptr, f, nullptr, flags, nullptr);
        if (rc == 0 && strcmp(f, "/") == 0) root_ok = true;
        if (rc == 0 && dev) dev_ok = true;
      }
    }
    line = next;
  }
  return root_ok;
}

// Runs in the process that will exec: mounts, limits, uid, then execve. Never returns.
[[noreturn]] void exec_child(ChildPlan& p, bool in_new_mount_ns, bool in_new_pid_ns) {
  int st = p.status_w;
  if (p.sb.enabled && in_new_mount_ns) {
    if (in_new_pid_ns) {
      if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0) applied(st, "procfs");
      else missing(st, "procfs");
    }
    if (p.sb.readonly_root) {
      bool ok = true;
      for (auto& w : p.writable_s) ok = ok && mount(w.c_str(), w.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0;
      bool proc_ok = true;
      for (const char* q : kProcReadOnly)
        if (access(q, F_OK) == 0) proc_ok = mount(q, q, nullptr, MS_BIND | MS_REC, nullptr) == 0 && proc_ok;
      bool nodes_ok = true;
      if (p.sb.private_dev) {
        struct stat dev_st, root_st;  // /dev must be a mount of its own to go nodev
        if (stat("/dev", &dev_st) == 0 && stat("/", &root_st) == 0 && dev_st.st_dev == root_st.st_dev)
          nodes_ok = mount("/dev", "/dev", nullptr, MS_BIND, nullptr) == 0;
        for (auto& d : p.dev_nodes_s) nodes_ok = mount(d.c_str(), d.c_str(), nullptr, MS_BIND, nullptr) == 0 && nodes_ok;
      }
      bool dev_ok = false;
      if (ok && make_readonly(p, dev_ok)) applied(st, "ro_root");
      else missing(st, "ro_root");
      if (proc_ok) applied(st, "proc_ro");
      else missing(st, "proc_ro");
      if (p.sb.private_dev) {
        if (nodes_ok && dev_ok) applied(st, "private_dev");
        else missing(st, "private_dev");
      }
    }
    if (!p.hidden_s.empty()) {
      bool ok = true;
      for (auto& h : p.hidden_s)
        ok = mount("tmpfs", h.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0") == 0 && ok;
      if (ok) applied(st, "hidden");
      else missing(st, "hidden");
    }
  } else if (p.sb.enabled && p.sb.readonly_root) {
    missing(st, "ro_root");
  }
  if (p.sb.enabled) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    set_limit(RLIMIT_CPU, p.sb.cpu_s);
    set_limit(RLIMIT_AS, p.sb.address_space_bytes);
    set_limit(RLIMIT_FSIZE, p.sb.file_size_bytes, p.sb.file_size_hard_bytes);
    set_limit(RLIMIT_NPROC, p.sb.processes);
    set_limit(RLIMIT_NOFILE, p.sb.open_files);
  }
  if (!p.cwd.empty() && chdir(p.cwd.c_str()) != 0) die(st, "chdir");
  if (p.sb.enabled) {
    // The bounding set needs CAP_SETPCAP to shrink: before setuid. Past the last capability the
    // kernel answers EINVAL; EPERM (a caller without capabilities) leaves nothing to drop.
    for (int c = 0; c < 64; ++c)
      if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  }
  if (p.sb.enabled && p.sb.uid >= 0) {
    gid_t g = static_cast<gid_t>(p.sb.uid);
    if (setgroups(0, nullptr) == 0 && setgid(g) == 0 && setuid(static_cast<uid_t>(p.sb.uid)) == 0) applied(st, "uid");
    else missing(st, "uid");
  }
  if (p.sb.enabled) {
    // uid 0 kept (or a caller with capabilities): empty every set; setuid above already emptied
    // them for another uid. no_new_privs: no exec (setuid binary, file capabilities) regains any.
    CapHeader h;
    CapData zero[2];
    syscall(SYS_capset, &h, zero);
    bool nnp = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
    CapData now[2];
    bool none = syscall(SYS_capget, &h, now) == 0;
    for (auto& d : now) none = none && d.effective == 0 && d.permitted == 0 && d.inheritable == 0;
    if (none && nnp) applied(st, "nocaps");
    else missing(st, "nocaps");
  }
  // Parent death = the intermediate pid-namespace parent (single-threaded). Not for a direct
  // child: PDEATHSIG fires when the spawning *thread* exits, and callers spawn from worker threads.
  if (in_new_pid_ns) prctl(PR_SET_PDEATHSIG, SIGKILL);  // after setuid, which clears it
  signal(SIGPIPE, SIG_DFL);
  execve(p.exe.c_str(), p.argv.data(), p.env.data());
  die(st, "exec");
}

[[noreturn]] void child_main(ChildPlan& p, pid_t parent) {
  int st = p.status_w;
  setsid();
  if (getppid() != parent) _exit(127);
  if (p.all_cpus) {  // the kernel keeps only the CPUs our cgroup allows
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    sched_setaffinity(0, sizeof(all), &all);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // stdio: 0 = stdin pipe or /dev/null, 1/2 = capture pipes, 3 = result pipe (optional)
  int in = p.pipe_stdin ? p.in_r : ::open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(p.out_w, 1) < 0 || dup2(p.err_w, 2) < 0) die(st, "dup2");
  if (p.result_pipe && dup2(p.res_w, 3) < 0) die(st, "dup2");
  for (int fd = p.result_pipe ? 4 : 3; fd < 1024; ++fd)
    if (fd != st) ::close(fd);

  bool mount_ns = false, pid_ns = false;
  if (p.sb.enabled && p.sb.new_user) {
    if (enter_user_namespace(p.uid_map.c_str(), p.gid_map.c_str())) applied(st, "userns");
    else missing(st, "userns");
  }
  if (p.sb.enabled) {
    if (p.sb.new_net) {
      if (unshare(CLONE_NEWNET) == 0) applied(st, "netns");
      else missing(st, "netns");
      if (unshare(CLONE_NEWUTS) == 0) applied(st, "utsns");  // hostname: not the machine's
      else missing(st, "utsns");
    }
    if (p.sb.new_mount) {
      if (unshare(CLONE_NEWIPC) == 0) applied(st, "ipcns");  // SysV shm/semaphores, POSIX queues
      else missing(st, "ipcns");
      if (unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
        mount_ns = true;
        applied(st, "mountns");
      } else {
        missing(st, "mountns");
      }
    }
    if (p.sb.new_pid) {
      if (unshare(CLONE_NEWPID) == 0) {
        pid_ns = true;
        applied(st, "pidns");
      } else {
        missing(st, "pidns");
      }
    }
  }
  if (!pid_ns) exec_child(p, mount_ns, false);

  // The first process forked after CLONE_NEWPID is pid 1 of the namespace: when it dies, the
  // kernel kills everything else inside. This process waits for it and mirrors its status.
  pid_t init = fork();
  if (init < 0) die(st, "fork");
  if (init == 0) exec_child(p, mount_ns, true);
  ::close(st);
  for (int fd = 0; fd < 4; ++fd) ::close(fd);
  int status = 0;
  while (waitpid(init, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  signal(sig, SIG_DFL);
  struct rlimit rl = {0, 0};
  setrlimit(RLIMIT_CORE, &rl);
  kill(getpid(), sig);
  _exit(128 + sig);
}

std::string resolve_exe(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string cand = dirs.substr(start, end - start) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return name;
}

void make_pipe(int fds[2]) {
  DICE_REQUIRE(pipe2(fds, O_CLOEXEC) == 0, "cannot create a pipe: ", std::strerror(errno));
}

// A child's status channel: everything until it closes (on exec, or when the child ends).
std::string read_to_end_and_close(int fd) {
  std::string all;
  char buf[512];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    all.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return all;
}

void append_tail(std::string& buf, const char* data, size_t n, size_t cap) {
  buf.append(data, n);
  if (buf.size() > cap) buf.erase(0, buf.size() - cap);
}

}  // namespace

Subprocess::Subprocess(const SpawnOptions& opts) : cap_(opts.capture_bytes) {
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });  // a dead child's stdin must not kill us
  DICE_REQUIRE(!opts.argv.empty(), "cannot start a process: empty command line");

  ChildPlan p;
  p.argv_s = opts.argv;
  p.exe = resolve_exe(opts.argv[0]);
  DICE_REQUIRE(access(p.exe.c_str(), X_OK) == 0, "cannot run '", opts.argv[0], "': not an executable file");
  if (opts.inherit_env)
    for (char** e = environ; *e; ++e) p.env_s.emplace_back(*e);
  for (const auto& e : opts.env) p.env_s.push_back(e);
  for (auto& s : p.argv_s) p.argv.push_back(s.data());
  p.argv.push_back(nullptr);
  for (auto& s : p.env_s) p.env.push_back(s.data());
  p.env.push_back(nullptr);
  p.cwd = opts.cwd;
  p.sb = opts.sandbox;
  p.uid_map = str(getuid(), " ", getuid(), " 1\n");
  p.gid_map = str(getgid(), " ", getgid(), " 1\n");
  for (const auto& w : opts.sandbox.writable_paths) {
    char buf[PATH_MAX];
    DICE_REQUIRE(realpath(w.c_str(), buf) != nullptr, "sandbox writable path '", w, "' does not exist");
    p.writable_s.emplace_back(buf);
  }
  for (const auto& h : opts.sandbox.hidden_paths) {
    char buf[PATH_MAX];
    if (realpath(h.c_str(), buf) != nullptr) p.hidden_s.emplace_back(buf);  // gone: nothing to hide
  }
  if (opts.sandbox.enabled && opts.sandbox.readonly_root && opts.sandbox.private_dev) {
    // Character devices only: the basic ones, and /dev/nvidia* and /dev/nvidia-caps/* for CUDA.
    auto add = [&](const std::string& path) {
      struct stat dst;
      if (lstat(path.c_str(), &dst) == 0 && S_ISCHR(dst.st_mode)) p.dev_nodes_s.push_back(path);
    };
    for (const char* n : kDevNodes) add(std::string("/dev/") + n);
    // POSIX readdir: std::filesystem resolves to LibTorch's exported copy in some binaries.
    for (const std::string& dir : {std::string("/dev"), std::string("/dev/nvidia-caps")}) {
      DIR* d = opendir(dir.c_str());
      if (!d) continue;
      while (struct dirent* e = readdir(d))
        if (dir != "/dev" || strncmp(e->d_name, "nvidia", 6) == 0) add(dir + "/" + e->d_name);
      closedir(d);
    }
  }
  p.mountinfo.resize(1 << 20);
  p.pipe_stdin = opts.pipe_stdin;
  p.result_pipe = opts.result_pipe;
  p.all_cpus = opts.all_cpus;

  int in[2] = {-1, -1}, out[2], err[2], res[2] = {-1, -1}, status[2];
  if (opts.pipe_stdin) make_pipe(in);
  make_pipe(out);
  make_pipe(err);
  if (opts.result_pipe) make_pipe(res);
  make_pipe(status);
  p.in_r = in[0];
  p.out_w = out[1];
  p.err_w = err[1];
  p.res_w = res[1];
  p.status_w = status[1];

  pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) child_main(p, parent);
  int fork_errno = errno;
  for (int fd : {in[0], out[1], err[1], res[1], status[1]})
    if (fd >= 0) ::close(fd);
  if (pid_ < 0) {
    for (int fd : {in[1], out[0], err[0], res[0], status[0]})
      if (fd >= 0) ::close(fd);
    throw Error(str("cannot start '", opts.argv[0], "': fork failed: ", std::strerror(fork_errno)));
  }
  cleanup_slot_ = cleanup::register_process(pid_);
  in_fd_ = in[1];
  out_fd_ = out[0];
  err_fd_ = err[0];
  res_fd_ = res[0];

  // The status pipe closes on exec (or child death); collect what was applied or refused.
  const std::string msgs = read_to_end_and_close(status[0]);
  size_t pos = 0;
  std::string fatal_msg;
  while (pos < msgs.size()) {
    size_t nl = msgs.find('\n', pos);
    if (nl == std::string::npos) nl = msgs.size();
    std::string line = msgs.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.size() < 3) continue;
    if (line[0] == 'A') applied_.push_back(line.substr(2));
    else if (line[0] == 'M') missing_.push_back(line.substr(2));
    else if (line[0] == 'E') fatal_msg = line.substr(2);
  }
  if (!fatal_msg.empty()) {
    kill();
    size_t sp = fatal_msg.rfind(' ');
    int e = std::atoi(fatal_msg.c_str() + sp + 1);
    throw Error(str("cannot start '", opts.argv[0], "' (", fatal_msg.substr(0, sp), "): ", std::strerror(e)));
  }
}

void Subprocess::detach() {
  detached_ = true;
  cleanup::unregister_process(cleanup_slot_);  // it outlives us by design: a signal does not end it
  cleanup_slot_ = -1;
}

Subprocess::~Subprocess() {
  if (!detached_) kill();
  for (int fd : {in_fd_, out_fd_, err_fd_, res_fd_})
    if (fd >= 0) ::close(fd);
}

bool Subprocess::reap(bool block) {
  if (reaped_) return true;
  for (;;) {
    pid_t r = waitpid(pid_, &raw_status_, block ? 0 : WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      ::kill(-pid_, SIGKILL);  // strays left in the group (without a pid namespace)
      cleanup::unregister_process(cleanup_slot_);
      cleanup_slot_ = -1;
      return true;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {  // not our child any more (should not happen): treat as gone
      reaped_ = true;
      raw_status_ = 0;
      cleanup::unregister_process(cleanup_slot_);
      cleanup_slot_ = -1;
      return true;
    }
    return false;
  }
}

bool Subprocess::running() { return !reap(false); }

void Subprocess::kill() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  reap(true);
}

bool Subprocess::write_stdin(const std::string& data) {
  if (in_fd_ < 0) return false;
  const char* s = data.data();
  size_t n = data.size();
  while (n > 0) {
    ssize_t w = ::write(in_fd_, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    s += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void Subprocess::close_stdin() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

void Subprocess::pump(double timeout_s, bool want_result) {
  struct pollfd fds[3];
  int* owners[3];
  int n = 0;
  for (int* fd : {&out_fd_, &err_fd_, &res_fd_}) {
    if (*fd < 0) continue;
    if (fd == &res_fd_ && !want_result) continue;
    fds[n].fd = *fd;
    fds[n].events = POLLIN;
    fds[n].revents = 0;
    owners[n++] = fd;
  }
  int ms = timeout_s <= 0 ? 0 : static_cast<int>(std::min(timeout_s, 3600.0) * 1000.0) + 1;
  int rc = poll(fds, static_cast<nfds_t>(n), ms);
  if (rc <= 0) return;
  char buf[65536];
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(*owners[i]);
      *owners[i] = -1;
      continue;
    }
    size_t m = static_cast<size_t>(r);
    if (owners[i] == &out_fd_) append_tail(out_, buf, m, cap_);
    else if (owners[i] == &err_fd_) append_tail(err_, buf, m, cap_);
    else append_tail(res_buf_, buf, m, 64u << 20);
  }
}

bool Subprocess::read_result_line(std::string& line, double timeout_s) {
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  for (;;) {
    size_t nl = res_buf_.find('\n');
    if (nl != std::string::npos) {
      line = res_buf_.substr(0, nl);
      res_buf_.erase(0, nl + 1);
      return true;
    }
    if (res_fd_ < 0) return false;
    double left = deadline > 0 ? deadline - now_s() : 1.0;
    if (left <= 0) return false;
    pump(std::min(left, 1.0), true);
  }
}

ExitStatus Subprocess::wait(double timeout_s) {
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  while (!reap(false)) {
    if (deadline > 0 && now_s() >= deadline) {
      killed_for_timeout_ = true;
      kill();
      break;
    }
    if (out_fd_ >= 0 || err_fd_ >= 0 || res_fd_ >= 0) pump(0.02, true);
    else usleep(10000);
  }
  // Drain what is left; descendants holding the pipes were killed with the group.
  double drain_until = now_s() + 1.0;
  while ((out_fd_ >= 0 || err_fd_ >= 0) && now_s() < drain_until) pump(0.05, true);
  ExitStatus s;
  s.timed_out = killed_for_timeout_;
  if (WIFEXITED(raw_status_)) {
    s.exited = true;
    s.code = WEXITSTATUS(raw_status_);
  } else if (WIFSIGNALED(raw_status_)) {
    s.signal = WTERMSIG(raw_status_);
  }
  return s;
}

RunResult run(const SpawnOptions& opts, double timeout_s, const std::string& stdin_data) {
  Timer t;
  Subprocess p(opts);
  if (opts.pipe_stdin) {
    p.write_stdin(stdin_data);
    p.close_stdin();
  }
  RunResult r;
  r.status = p.wait(timeout_s);
  r.out = p.stdout_tail();
  r.err = p.stderr_tail();
  r.wall_s = t.elapsed_s();
  r.protections = p.protections();
  r.protections_missing = p.protections_missing();
  return r;
}

std::string user_namespace_refusal() {
  const std::string uid_map = str(getuid(), " ", getuid(), " 1\n"), gid_map = str(getgid(), " ", getgid(), " 1\n");
  int fds[2];
  make_pipe(fds);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    const int w = fds[1];
    // Each step as a sandboxed child takes it; the first refusal is reported as "step errno".
    if (!enter_user_namespace(uid_map.c_str(), gid_map.c_str()))
      die(w, "the user namespace (unshare CLONE_NEWUSER and its uid map)");
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) != 0)
      die(w, "the mount, pid, network and IPC namespaces");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die(w, "a private mount tree");
    pid_t init = fork();
    if (init < 0) die(w, "fork");
    if (init == 0) {
      if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) die(w, "a fresh /proc");
      if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=4k") != 0) die(w, "a tmpfs");
      _exit(0);
    }
    int status = 0;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return str("fork failed: ", std::strerror(errno));
  }
  const std::string msg = read_to_end_and_close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (msg.rfind("E ", 0) == 0) {  // "E <step> <errno>\n"
    size_t sp = msg.find_last_of(' ');
    const int e = std::atoi(msg.c_str() + sp + 1);
    return str(msg.substr(2, sp - 2), " was refused: ", std::strerror(e));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the probe process failed";
  return "";
}

}  // namespace dice::proc
