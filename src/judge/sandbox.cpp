// Sandbox plumbing shared by compile workers and executors.
#include "dice/judge/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::judge {

namespace stdfs = std::filesystem;

void remove_tree(const std::string& path) { fs::remove_tree(path); }

namespace {
void make_dir_with_mode(const std::string& path, mode_t mode) {
  std::error_code ec;
  stdfs::create_directories(path, ec);
  DICE_REQUIRE(!ec, "cannot create directory '", path, "': ", ec.message());
  chmod(path.c_str(), mode);
}
}  // namespace

void make_public_dir(const std::string& path) { make_dir_with_mode(path, 01777); }

void make_cache_dir(const std::string& path) { make_dir_with_mode(path, 0755); }

Scratch::Scratch(const std::string& path, int uid) : path_(path), uid_(uid) {
  remove_tree(path_);
  std::error_code ec;
  stdfs::create_directories(path_, ec);
  DICE_REQUIRE(!ec, "cannot create the scratch directory '", path_, "': ", ec.message());
  if (uid_ >= 0) DICE_REQUIRE(chown(path_.c_str(), uid_, uid_) == 0, "cannot chown '", path_, "': ", std::strerror(errno));
  chmod(path_.c_str(), 0700);
}

Scratch::~Scratch() { remove_tree(path_); }

void Scratch::clear() { fs::clear_dir(path_); }

bool readable_by_others(const std::string& path) {
  // every directory on the way and the file itself must be o+r (and dirs o+x)
  stdfs::path p = stdfs::absolute(path);
  std::error_code ec;
  stdfs::path canon = stdfs::canonical(p, ec);
  if (ec) return false;
  for (stdfs::path cur = canon; ; cur = cur.parent_path()) {
    struct stat st;
    if (::stat(cur.c_str(), &st) != 0) return false;
    if (S_ISDIR(st.st_mode) ? !(st.st_mode & S_IXOTH) : !(st.st_mode & S_IROTH)) return false;
    if (cur == cur.root_path()) break;
  }
  return true;
}

void check_sandbox_settings(const SandboxConfig& cfg, int uid) {
  if (!cfg.enabled) return;  // no sandbox at all: documented as for trusted code only
  DICE_REQUIRE(cfg.readonly_root,
               "sandbox.readonly_root=false is not allowed: with a writable file system a candidate could leave "
               "files in /tmp, /dev/shm or /var/tmp for the next one. Remove the setting: CUDA starts under the "
               "read-only view (only /proc stays writable); `dice doctor --set device=cuda` shows what this machine "
               "grants, and sandbox.enabled=false turns the sandbox off for code you trust");
  DICE_REQUIRE(cfg.mount_namespace,
               "sandbox.mount_namespace=false is not allowed: without a mount namespace there is no read-only view, "
               "and a candidate could write outside its scratch directory. Remove the setting (sandbox.enabled=false "
               "turns the sandbox off for code you trust)");
  const bool root = uid == 0 || (uid == -1 && geteuid() == 0);
  DICE_REQUIRE(cfg.private_dev || !root,
               "sandbox.private_dev=false needs a sandbox uid other than 0: a process that keeps uid 0 could create "
               "files in /dev for the next candidate. Set sandbox.uid_base to -1 (automatic) or a uid such as 60000");
}

bool uses_user_namespace(const SandboxConfig& cfg) { return cfg.enabled && geteuid() != 0; }

namespace {
std::string sysctl_value(const std::string& name) {
  std::string path = "/proc/sys/" + name;
  std::replace(path.begin() + 10, path.end(), '.', '/');
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "";
  char buf[64] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string v = ok ? buf : "";
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}
}  // namespace

std::string user_namespace_problem(const SandboxConfig& cfg) {
  if (!uses_user_namespace(cfg)) return "";
  const std::string refused = proc::user_namespace_refusal();
  if (refused.empty()) return "";
  // The usual causes, most specific first; each names the setting and who can change it.
  std::string cause;
  if (sysctl_value("user.max_user_namespaces") == "0")
    cause = "user namespaces are turned off on this machine (sysctl user.max_user_namespaces=0); an administrator "
            "can allow them with `sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d to keep it)";
  else if (sysctl_value("kernel.unprivileged_userns_clone") == "0")
    cause = "this kernel allows user namespaces only to root (sysctl kernel.unprivileged_userns_clone=0); an "
            "administrator can allow them with `sysctl -w kernel.unprivileged_userns_clone=1`";
  else if (sysctl_value("kernel.apparmor_restrict_unprivileged_userns") == "1")
    cause = "AppArmor restricts user namespaces to programs with a profile that allows them "
            "(kernel.apparmor_restrict_unprivileged_userns=1); an administrator can add a profile with the line "
            "`userns,` for this dice binary (see docs/judge.md, \"A cluster user\")";
  else
    cause = "the kernel or the container this runs in refuses them (a container's seccomp profile, or a "
            "security module); run dice outside the container, or ask an administrator to allow unprivileged "
            "user namespaces";
  return str("the judge does not run as root, so it builds the sandbox for candidate code in a user namespace, "
             "and ", refused, ": ", cause, ". Without it candidates would run with your rights (they could write "
             "your files and leave processes behind); to accept that for code you trust, set "
             "judge.sandbox.allow_unsandboxed=true");
}

bool require_user_namespace(const SandboxConfig& cfg) {
  const std::string problem = user_namespace_problem(cfg);
  if (problem.empty()) return false;
  if (!cfg.allow_unsandboxed) throw Error(problem);
  log::warn("judge: UNSANDBOXED (judge.sandbox.allow_unsandboxed=true): candidates run with this user's rights, "
            "because ", problem.substr(0, problem.find(". Without it")));
  return true;
}

std::string describe_sandbox(const SandboxConfig& cfg, int uid) {
  if (!cfg.enabled) return "no sandbox (sandbox.enabled=false): candidates run as this process, with its rights";
  std::string who = uid >= 0 ? str("uid ", uid) : str("the caller's uid ", geteuid());
  if (uses_user_namespace(cfg)) who += " in a user namespace of its own (no capabilities outside it)";
  if (uid == 0 || (uid < 0 && geteuid() == 0)) who += " without capabilities";
  return str(who, "; read-only file system except the scratch directory and /proc (/proc/sys read-only); ",
             cfg.private_dev ? "private /dev (read-only, only null zero full random urandom tty nvidia*)"
                             : "/dev as it is (not writable by the sandbox uid)",
             cfg.network_namespace ? "; no network" : "; network shared", cfg.pid_namespace ? "; own pid namespace" : "");
}

// The automatic uid range of this process: 60000 + 64 k for the first k whose lock file no other
// living process holds (flock, held until this process ends). Judges of two processes on one machine
// (two ranks, two test binaries) then never share a slot uid, and so never a per-uid process limit:
// a fork bomb judged by one cannot starve the other's candidates. Judges of one process share it.
namespace {
int claimed_uid_base() {
  static const int base = [] {
    for (int k = 0; k < 64; ++k) {
      const int b = 60000 + 64 * k;
      const std::string file = "/tmp/dice_sandbox_uids_" + std::to_string(b) + ".lock";
      const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) continue;
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) return b;  // fd stays open: the claim lasts the process
      ::close(fd);
    }
    log::warn("judge: no free sandbox uid range among 64 (/tmp/dice_sandbox_uids_*.lock); using 60000");
    return 60000;
  }();
  return base;
}
}  // namespace

int resolve_uid_base(const SandboxConfig& cfg, const std::string& python) {
  check_sandbox_settings(cfg, -2);
  if (!cfg.enabled || cfg.uid_base == -2) return -1;
  if (cfg.uid_base >= 0) return cfg.uid_base;
  if (geteuid() != 0) return -1;
  std::string exe = python;
  if (exe.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    size_t s = 0;
    while (s <= dirs.size()) {
      size_t e = dirs.find(':', s);
      if (e == std::string::npos) e = dirs.size();
      std::string c = dirs.substr(s, e - s) + "/" + python;
      if (access(c.c_str(), X_OK) == 0) {
        exe = c;
        break;
      }
      s = e + 1;
    }
  }
  if (!readable_by_others(exe)) {
    log::warn("judge: ", exe, " is not readable by other users; sandboxed processes keep uid 0 without capabilities "
              "(no per-slot process limit)");
    return -1;
  }
  return claimed_uid_base();
}

proc::SpawnOptions sandboxed_python(const SandboxConfig& cfg, const std::string& python,
                                    const std::vector<std::string>& args, const std::string& scratch,
                                    const std::vector<std::string>& extra_writable, int uid, bool cuda,
                                    const std::vector<std::string>& extra_env) {
  check_sandbox_settings(cfg, uid);
  proc::SpawnOptions o;
  o.argv = {python};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.cwd = scratch;
  const char* path = std::getenv("PATH");
  o.env = {str("PATH=", path ? path : "/usr/local/bin:/usr/bin:/bin"),
           "HOME=" + scratch,
           // A sandbox uid has no passwd entry: getpass.getuser() (torch 2.x asks it for
           // inductor's cache dir at import) would raise, so every sandboxed process is named.
           "USER=dice-sandbox",
           "LOGNAME=dice-sandbox",
           "TORCHINDUCTOR_CACHE_DIR=" + scratch + "/torchinductor",
           "TMPDIR=" + scratch,
           "TORCH_EXTENSIONS_DIR=" + scratch + "/torch_extensions",
           "LANG=C.UTF-8",
           "PYTHONDONTWRITEBYTECODE=1",
           "PYTHONNOUSERSITE=1",
           "PYTHONUNBUFFERED=1",
           "OMP_NUM_THREADS=1",
           "MKL_NUM_THREADS=1"};
  for (const auto& k : cfg.env_passthrough)
    if (const char* v = std::getenv(k.c_str())) o.env.push_back(k + "=" + v);
  for (const auto& e : extra_env) {  // later entries override earlier ones with the same key
    std::string key = e.substr(0, e.find('=') + 1);
    o.env.erase(std::remove_if(o.env.begin(), o.env.end(), [&](const std::string& x) { return x.rfind(key, 0) == 0; }),
                o.env.end());
    o.env.push_back(e);
  }
  o.pipe_stdin = true;
  o.result_pipe = true;
  auto& sb = o.sandbox;
  sb.enabled = cfg.enabled;
  sb.new_net = cfg.network_namespace;
  sb.new_mount = cfg.mount_namespace;
  sb.new_pid = cfg.pid_namespace;
  sb.readonly_root = cfg.readonly_root;
  sb.private_dev = cfg.private_dev;
  sb.writable_paths = {scratch};
  for (const auto& w : extra_writable) sb.writable_paths.push_back(w);
  if (uid < 0 && cfg.enabled) {
    // The uid is kept, so the other slots' private (0700) scratch directories beside this one
    // belong to the same uid: hidden behind an empty tmpfs. (Made later: see docs/judge.md, "The sandbox".)
    std::string parent = scratch.substr(0, scratch.find_last_of('/'));
    if (DIR* d = parent.empty() ? nullptr : opendir(parent.c_str())) {
      while (struct dirent* e = readdir(d)) {
        std::string name = e->d_name, path = parent + "/" + name;
        struct stat st;
        if (name == "." || name == ".." || path == scratch || lstat(path.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && (st.st_mode & 0077) == 0 &&
            std::find(extra_writable.begin(), extra_writable.end(), path) == extra_writable.end())
          sb.hidden_paths.push_back(path);
      }
      closedir(d);
    }
  }
  sb.file_size_bytes = cfg.file_size_mb << 20;
  sb.address_space_bytes = cuda ? 0 : (cfg.memory_mb << 20);
  sb.open_files = cfg.open_files;
  sb.uid = uid;
  // RLIMIT_NPROC counts per uid, and per user namespace: with a slot uid, or a namespace of its own
  sb.new_user = uses_user_namespace(cfg);
  sb.processes = uid >= 0 || sb.new_user ? cfg.processes : 0;
  return o;
}

}  // namespace dice::judge
