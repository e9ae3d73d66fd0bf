// Run-directory contract: writability, exclusive lock, fingerprint (see dice/util/run_dir.h).
#include "dice/util/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::run_dir {
namespace stdfs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Creates and removes a probe file: permission bits alone do not tell (root, read-only mounts).
std::string probe_error(const std::string& dir) {
  std::string probe = str(dir, "/.dice_write_probe.", ::getpid());
  int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

void ensure_writable_dir(const std::string& dir, const std::string& flag) {
  DICE_REQUIRE(!dir.empty(), flag, " is empty: name the folder to write the results to.");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    DICE_REQUIRE(S_ISDIR(st.st_mode), flag, " ", dir, " is a file, not a folder; pass a folder (it is created if missing).");
  } else {
    std::error_code ec;
    stdfs::create_directories(dir, ec);
    DICE_REQUIRE(!ec && stdfs::is_directory(dir), "cannot create the ", flag, " folder ", dir, ": ",
                 ec ? ec.message() : std::string("a parent is not a folder"), "; pick a writable place.");
  }
  std::string err = probe_error(dir);
  DICE_REQUIRE(err.empty(), "the ", flag, " folder ", dir, " is not writable (", err,
               "); pick a writable place before any work is done.");
}

void ensure_writable_file(const std::string& path, const std::string& flag) {
  DICE_REQUIRE(!path.empty(), flag, " is empty: name the file to write.");
  DICE_REQUIRE(!stdfs::is_directory(path), flag, " ", path, " is a folder; pass a file name.");
  stdfs::path parent = stdfs::path(path).parent_path();
  std::string dir = parent.empty() ? "." : parent.string();
  DICE_REQUIRE(stdfs::is_directory(dir), "the folder of ", flag, " ", path, " (", dir,
               ") does not exist; create it first, before any work is done.");
  std::string err = probe_error(dir);
  DICE_REQUIRE(err.empty(), "cannot write ", flag, " ", path, ": its folder ", dir, " is not writable (", err, ").");
}

DirLock::DirLock(const std::string& lock_path, const std::string& what, bool remove_on_release)
    : path_(lock_path), remove_(remove_on_release) {
  int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  DICE_REQUIRE(fd >= 0, "cannot create the lock file ", lock_path, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[256] = {0};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw Error(str(what, " is in use by another dice run (", holder,
                    "); wait for it to end, or write to another place."));
  }
  // The lock is ours: any holder recorded in the file is gone (the kernel dropped its flock).
  char old[256] = {0};
  ssize_t n = ::pread(fd, old, sizeof old - 1, 0);
  if (n > 0) {
    std::string prev(old, static_cast<size_t>(n));
    while (!prev.empty() && prev.back() == '\n') prev.pop_back();
    log::info("taking over the lock of ", what, " left by a run that has ended (", prev, ")");
  }
  std::string me = str("host ", host_name(), ", pid ", ::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    log::warn("could not record the holder in ", lock_path, ": ", std::strerror(errno));
  fd_ = fd;
}

void DirLock::release() {
  if (fd_ < 0) return;
  if (remove_) ::unlink(path_.c_str());  // before unlocking: a waiter then locks a new file
  else if (::ftruncate(fd_, 0) != 0) {}  // an empty file: no holder
  ::close(fd_);
  fd_ = -1;
}

DirLock::~DirLock() { release(); }

DirLock::DirLock(DirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), remove_(o.remove_) { o.fd_ = -1; }

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    remove_ = o.remove_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock lock_dir(const std::string& dir, const std::string& what) {
  return DirLock(dir + "/" + kLockFile, what, false);
}

DirLock lock_file(const std::string& file, const std::string& what) { return DirLock(file + ".lock", what, true); }

std::optional<Fingerprint> read_fingerprint(const std::string& dir) {
  const std::string path = dir + "/" + kFingerprintFile;
  if (!fs::exists(path)) return std::nullopt;
  auto j = nlohmann::json::parse(fs::read_file(path), nullptr, false);
  DICE_REQUIRE(!j.is_discarded() && j.is_object(), path, " is not a JSON object; it records what made the results in ",
               dir, ". Restore it, or rerun with --fresh to start over.");
  Fingerprint fp;
  for (auto& [k, v] : j.items()) fp[k] = v.is_string() ? v.get<std::string>() : v.dump();
  return fp;
}

void write_fingerprint(const std::string& dir, const Fingerprint& fp) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : fp) j[k] = v;
  fs::write_file_atomic(dir + "/" + kFingerprintFile, j.dump(2) + "\n");
}

std::string describe_differences(const Fingerprint& then, const Fingerprint& now) {
  auto shown = [](const Fingerprint& f, const std::string& k) {
    auto it = f.find(k);
    if (it == f.end()) return std::string("unset");
    std::string v = it->second;
    while (!v.empty() && v.back() == '\n') v.pop_back();
    if (v.size() > 80) v = v.substr(0, 77) + "...";
    return "'" + v + "'";
  };
  // "about.K" keys describe K for people (e.g. the checkpoint's path beside its digest): shown in
  // place of K's value, never compared.
  auto about = [&](const Fingerprint& f, const std::string& k) {
    auto it = f.find("about." + k);
    return it == f.end() ? shown(f, k) : str(shown(f, it->first), " ", shown(f, k).substr(0, 13), "...'");
  };
  std::map<std::string, int> keys;
  for (const auto& [k, v] : then) keys[k] |= 1;
  for (const auto& [k, v] : now) keys[k] |= 2;
  std::string out;
  int listed = 0, more = 0;
  for (const auto& [k, where] : keys) {
    if (k.rfind("about.", 0) == 0 || (where == 3 && then.at(k) == now.at(k))) continue;
    if (listed == 8) { ++more; continue; }
    out += str(out.empty() ? "" : ", ", k, " (", about(then, k), " then, ", about(now, k), " now)");
    ++listed;
  }
  if (more) out += str(" and ", more, " more");
  return out;
}

OnMismatch on_mismatch_from_flags(bool fresh, bool continue_anyway) {
  DICE_REQUIRE(!(fresh && continue_anyway), "--fresh and --continue-anyway contradict each other; pass one of them.");
  return fresh ? OnMismatch::kFresh : continue_anyway ? OnMismatch::kContinue : OnMismatch::kRefuse;
}

Plan plan_resume(const std::string& dir, const Fingerprint& now, bool has_results, OnMismatch on_mismatch,
                 const std::string& what) {
  if (on_mismatch == OnMismatch::kFresh) return has_results ? Plan::kFresh : Plan::kNew;
  if (!has_results) return Plan::kNew;
  auto then = read_fingerprint(dir);
  std::string diff = then ? describe_differences(*then, now)
                          : std::string("no fingerprint.json records what made them (an older dice, or a copy)");
  if (diff.empty()) return Plan::kResume;
  if (on_mismatch == OnMismatch::kContinue) {
    log::warn(what, " ", dir, ": continuing although the stored results were made differently: ", diff);
    return Plan::kResume;
  }
  throw Error(str(what, " ", dir, " holds results made differently: ", diff,
                  ". Resuming would mix them. Rerun with --fresh to delete them and start over, with ",
                  "--continue-anyway to keep them, or write to another place."));
}

void clear_results(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec)) {
    if (e.path().filename() == kLockFile) continue;
    DICE_REQUIRE(fs::remove_tree(e.path().string()), "cannot remove the old result ", e.path().string(),
                 " (--fresh); remove it by hand.");
  }
}

}  // namespace dice::run_dir
