#pragma once
// Child processes: spawn with argv/env/cwd, bounded capture of stdout/stderr (the tail is kept),
// optional stdin, an optional dedicated result pipe (fd 3 in the child), wall timeout, and
// process-group kill. Optionally sandboxed: own session, rlimits, network/mount/pid namespaces,
// the whole file system read-only except the writable paths, a scrubbed environment, another uid.
//
// Contract: a Subprocess owns its child. Destroying it (or kill()) sends SIGKILL to the child's
// process group and reaps it; with a pid namespace every process the child started dies with it.
// Protections that the kernel refused (EPERM) are skipped and listed in protections_missing().
//
// The read-only view (readonly_root, in the child's own mount namespace): every mount is remounted
// read-only except the writable paths and /proc (a fresh procfs with a pid namespace; CUDA's cuInit
// fails with error 304 under a read-only /proc), whose kernel-wide parts (/proc/sys, sysrq-trigger,
// irq, bus, fs, ...) are bound read-only. /dev is read-only and nodev with only the device nodes a
// program needs (null, zero, full, random, urandom, tty, nvidia*) bound back in (private_dev), or
// left as it is (private_dev=false; only safe for a non-root uid, which cannot create files there).
// Hidden paths get an empty read-only tmpfs over them. A caller without CAP_SYS_ADMIN gets the
// same through a user namespace of its own (new_user). A sandboxed child never keeps a capability:
// the bounding, ambient, effective, permitted and inheritable sets are emptied and no_new_privs is
// set, so a child that keeps uid 0 cannot remount, chown, mknod or bypass file permissions.
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dice::proc {

struct SandboxOptions {
  bool enabled = false;
  bool new_net = true;       // CLONE_NEWNET: no network but a down loopback
  bool new_mount = true;     // CLONE_NEWNS: needed for the read-only view
  bool new_pid = true;       // CLONE_NEWPID: all descendants die with the child
  bool readonly_root = true; // remount every mount read-only except writable_paths (needs new_mount)
  bool private_dev = true;   // read-only nodev /dev with only the needed device nodes (readonly_root)
  std::vector<std::string> writable_paths;  // stay writable (the scratch dir, a build cache)
  std::vector<std::string> hidden_paths;    // covered by an empty read-only tmpfs (needs new_mount)
  // rlimits; 0 = leave unchanged.
  long cpu_s = 0;
  long address_space_bytes = 0;  // do not set for CUDA processes (they reserve huge VA ranges)
  long file_size_bytes = 0;
  long file_size_hard_bytes = 0;  // > file_size_bytes: the hard limit above the soft one (the process may raise its own)
  long processes = 0;  // RLIMIT_NPROC counts per uid: only meaningful together with uid
  long open_files = 0;
  int uid = -1;  // setuid/setgid to this id after the namespaces are set up (-1: keep)
  // CLONE_NEWUSER first, with the caller's uid and gid mapped to themselves: what a caller
  // without CAP_SYS_ADMIN (a cluster user) needs for every namespace and mount above. The child
  // keeps the caller's uid; its capabilities exist only inside its own namespaces and are dropped
  // before exec like every other. RLIMIT_NPROC then counts the processes of this namespace only.
  bool new_user = false;
};

// Why this process cannot make the user namespace a sandboxed child needs ("" when it can): one
// forked probe that unshares a user, mount and pid namespace, maps its uid, mounts a tmpfs and
// remounts / read-only, as the child would. The sentence names the step and the errno.
std::string user_namespace_refusal();

struct SpawnOptions {
  std::vector<std::string> argv;        // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;         // "KEY=VALUE" entries
  bool inherit_env = false;             // false: the child sees only `env` (scrubbed)
  std::string cwd;                      // "" = the caller's
  bool pipe_stdin = false;              // false: stdin is /dev/null
  bool result_pipe = false;             // fd 3 in the child: a channel its output cannot corrupt
  size_t capture_bytes = 64 * 1024;     // tail kept per stream
  // true: the child may run on every CPU this machine (and its cgroup) allows, not just the ones the
  // caller is pinned to (mpirun/srun bind a rank to one core; parallel builds need them all).
  bool all_cpus = false;
  SandboxOptions sandbox;
};

// CPUs this process may run on, and CPUs online ("1 of 32": pinned by mpirun/srun).
// The last n characters of s (a process's output in an error message or a log).
inline std::string tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

int cpus_allowed();
int cpus_online();

struct ExitStatus {
  bool exited = false;   // normal exit: code is valid
  int code = -1;
  int signal = 0;        // killed by this signal (SIGKILL after a timeout)
  bool timed_out = false;
  std::string describe() const;  // "exit 0", "signal 9 (Killed)", "timeout"
};

class Subprocess {
 public:
  // Starts the child; throws dice::Error when it cannot (bad executable, fork failure).
  explicit Subprocess(const SpawnOptions& opts);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // Protections applied / refused by the kernel, e.g. "netns", "ipcns", "utsns", "mountns", "pidns",
  // "procfs", "ro_root", "private_dev", "proc_ro", "hidden", "uid", "nocaps".
  const std::vector<std::string>& protections() const { return applied_; }
  const std::vector<std::string>& protections_missing() const { return missing_; }

  // Writes to the child's stdin (pipe_stdin); false if the child closed it or died.
  bool write_stdin(const std::string& data);
  void close_stdin();
  // Reads one line ('\n' stripped) from the result pipe, draining stdout/stderr meanwhile.
  // Returns false on timeout (timeout_s <= 0: wait forever) or when the pipe closed (child died).
  bool read_result_line(std::string& line, double timeout_s);
  // Waits for exit, killing the process group after timeout_s (<= 0: no limit).
  ExitStatus wait(double timeout_s);
  void kill();  // SIGKILL to the process group, then reap
  // Gives up ownership: the destructor neither kills nor reaps the child, which runs on (and is
  // reparented to init when this process exits). For trusted helpers whose work outlives the caller
  // (a cache entry); the child must not rely on its stdout/stderr pipes any more.
  void detach();

  const std::string& stdout_tail() const { return out_; }
  const std::string& stderr_tail() const { return err_; }

 private:
  void pump(double timeout_s, bool want_result);  // poll once over the open pipes
  bool reap(bool block);

  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1, res_fd_ = -1;
  size_t cap_;
  std::string out_, err_, res_buf_;
  bool reaped_ = false;
  int raw_status_ = 0;
  bool killed_for_timeout_ = false;
  bool detached_ = false;
  int cleanup_slot_ = -1;  // dice::cleanup's record of this child (killed on SIGINT/SIGTERM/SIGHUP)
  std::vector<std::string> applied_, missing_;
};

struct RunResult {
  ExitStatus status;
  std::string out;   // stdout tail
  std::string err;   // stderr tail
  double wall_s = 0;
  std::vector<std::string> protections, protections_missing;
};

// Spawn, feed stdin_data (when pipe_stdin), wait with a wall timeout, return the tails.
RunResult run(const SpawnOptions& opts, double timeout_s, const std::string& stdin_data = "");

}  // namespace dice::proc
