#pragma once
// Sandbox settings shared by compile workers and executors (DESIGN §5 "Sandbox").
#include <string>
#include <vector>

#include "dice/util/subprocess.h"

namespace dice::judge {

struct SandboxConfig {
  bool enabled = true;
  // Each sandbox slot runs as uid_base + slot, so RLIMIT_NPROC is per slot (a fork bomb in one
  // slot cannot starve another). -1: automatic (60000 when the judge runs as root and the
  // interpreter is readable by others, else the caller's uid); -2: never change the uid. A
  // sandboxed process that keeps uid 0 has no capabilities (docs/judge.md, "The sandbox").
  int uid_base = -1;
  long processes = 256;
  long open_files = 1024;
  long file_size_mb = 256;
  // The evaluating candidate process writes its outputs into one file: KernelBench's largest
  // level-1 outputs are 6 GiB (the built-in CUDA tasks' 512 MiB already exceed file_size_mb).
  long output_file_mb = 16384;
  long memory_mb = 8192;  // RLIMIT_AS for CPU work; never applied to CUDA executors
  bool network_namespace = true;
  bool mount_namespace = true;
  bool pid_namespace = true;
  bool readonly_root = true;  // false is refused: it let candidates leave files for each other
  bool private_dev = true;    // false (only with a sandbox uid other than 0): /dev as it is
  // A judge that is not root builds the sandbox in a user namespace of its own. Where the machine
  // refuses one, the judge stops with a sentence, unless this is true: candidates then run with
  // only what the kernel granted (rlimits, a session), said at start and in every verdict.
  bool allow_unsandboxed = false;
  std::vector<std::string> env_passthrough = {"CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH",
                                              "NVIDIA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST"};

  template <class V> void visit(V& v) {
    v("enabled", enabled, "run candidates in a sandbox (namespaces, rlimits, read-only root)");
    v("uid_base", uid_base, "uid of slot 0 (-1 auto, -2 keep the caller's uid)");
    v("processes", processes, "RLIMIT_NPROC per slot uid");
    v("open_files", open_files, "RLIMIT_NOFILE");
    v("file_size_mb", file_size_mb, "RLIMIT_FSIZE in MiB");
    v("output_file_mb", output_file_mb,
      "RLIMIT_FSIZE in MiB of the evaluating candidate process (its outputs are written to one file)");
    v("memory_mb", memory_mb, "RLIMIT_AS in MiB for CPU-only processes (0 = none)");
    v("network_namespace", network_namespace, "unshare the network namespace");
    v("mount_namespace", mount_namespace, "unshare the mount namespace");
    v("pid_namespace", pid_namespace, "unshare the pid namespace");
    v("readonly_root", readonly_root, "remount everything read-only except scratch and /proc (must stay true)");
    v("private_dev", private_dev,
      "read-only nodev /dev with only null, zero, full, random, urandom, tty, nvidia* (false: /dev as it is, "
      "for runtimes that refuse device nodes otherwise; needs a sandbox uid other than 0)");
    v("allow_unsandboxed", allow_unsandboxed,
      "where this machine refuses the user namespace a non-root judge needs, run candidates anyway with "
      "only rlimits and a session of their own (they can write wherever you can; recorded in every verdict)");
    v("env_passthrough", env_passthrough, "environment variables copied into the sandbox");
  }
};

// A private scratch directory owned by the sandbox uid; removed on destruction.
class Scratch {
 public:
  Scratch(const std::string& path, int uid);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }
  void clear();  // empties it (between candidates)

 private:
  std::string path_;
  int uid_;
};

// True when every directory on the way to path is o+x and path itself o+r (dirs: o+x).
bool readable_by_others(const std::string& path);

// Resolves uid_base = -1 to a concrete choice for this process and interpreter; -2 -> -1 (keep).
// Throws dice::Error for a setting that would open the sandbox (check_sandbox_settings).
int resolve_uid_base(const SandboxConfig& cfg, const std::string& python);

// Refuses, with a sentence, the settings under which a candidate could write outside its scratch
// directory or leave files for the next one: readonly_root=false, mount_namespace=false, and
// private_dev=false for a process that keeps uid 0. `uid` as resolved (-1: the caller's);
// uid < -1 checks only what does not depend on it.
void check_sandbox_settings(const SandboxConfig& cfg, int uid);

// True when sandboxed processes are built in a user namespace of their own (the judge is not root).
bool uses_user_namespace(const SandboxConfig& cfg);

// "" when a non-root judge can build its sandbox here (or the judge is root, or the sandbox is
// off); otherwise why not and what fixes it, one sentence naming the sysctl, AppArmor rule or
// container setting that refused the user namespace.
std::string user_namespace_problem(const SandboxConfig& cfg);

// Throws dice::Error with user_namespace_problem's sentence unless cfg.allow_unsandboxed; with
// it, logs a warning and returns true (candidates run unsandboxed). False: the sandbox holds.
bool require_user_namespace(const SandboxConfig& cfg);

// One sentence for logs and `dice doctor`: the uid, the file-system view, what stays writable.
std::string describe_sandbox(const SandboxConfig& cfg, int uid);

// Spawn options for a sandboxed Python run in `scratch`, with `extra_writable` also writable.
proc::SpawnOptions sandboxed_python(const SandboxConfig& cfg, const std::string& python,
                                    const std::vector<std::string>& args, const std::string& scratch,
                                    const std::vector<std::string>& extra_writable, int uid, bool cuda,
                                    const std::vector<std::string>& extra_env);

void remove_tree(const std::string& path);
// mkdir -p with mode 01777 (world-writable, sticky): a directory shared by the slot uids.
void make_public_dir(const std::string& path);
// mkdir -p with mode 0755: a build cache that only this process writes and sandboxes read.
void make_cache_dir(const std::string& path);

}  // namespace dice::judge
