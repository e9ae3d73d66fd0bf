// Sandbox plumbing shared by compile workers and executors.
#include "dice/judge/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

int resolve_uid_base(const SandboxConfig& cfg, const std::string& python) {
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
    log::warn("judge: ", exe, " is not readable by other users; sandboxed processes keep uid 0 (no per-slot process limit)");
    return -1;
  }
  return 60000;
}

proc::SpawnOptions sandboxed_python(const SandboxConfig& cfg, const std::string& python,
                                    const std::vector<std::string>& args, const std::string& scratch,
                                    const std::vector<std::string>& extra_writable, int uid, bool cuda,
                                    const std::vector<std::string>& extra_env) {
  proc::SpawnOptions o;
  o.argv = {python};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.cwd = scratch;
  const char* path = std::getenv("PATH");
  o.env = {str("PATH=", path ? path : "/usr/local/bin:/usr/bin:/bin"),
           "HOME=" + scratch,
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
  sb.writable_paths = {scratch};
  for (const auto& w : extra_writable) sb.writable_paths.push_back(w);
  sb.file_size_bytes = cfg.file_size_mb << 20;
  sb.address_space_bytes = cuda ? 0 : (cfg.memory_mb << 20);
  sb.open_files = cfg.open_files;
  sb.uid = uid;
  sb.processes = uid >= 0 ? cfg.processes : 0;
  return o;
}

}  // namespace dice::judge
