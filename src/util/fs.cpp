// File helpers.
#include "dice/util/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/syscall.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "dice/util/error.h"

namespace dice::fs {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DICE_REQUIRE(in, "cannot read '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void for_each_line(const std::string& path, const std::function<void(int, const std::string&)>& fn) {
  std::ifstream in(path, std::ios::binary);
  DICE_REQUIRE(in, "cannot read '", path, "': ", std::strerror(errno));
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    fn(lineno, line);
  }
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  DICE_REQUIRE(out, "cannot write '", path, "': ", std::strerror(errno));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  DICE_REQUIRE(out.good(), "short write to '", path, "' (disk full?)");
}

namespace {
std::string parent_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& data) {
  std::string tmp = str(path, ".tmp.", getpid());
  int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  DICE_REQUIRE(fd >= 0, "cannot write '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  int err = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { err = n < 0 ? errno : ENOSPC; break; }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  if (err != 0) {
    ::unlink(tmp.c_str());  // the old file, if any, is untouched
    throw Error(str("cannot write '", path, "': ", std::strerror(err), "; the previous version (if any) is kept."));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw Error(str("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err)));
  }
  fsync_path(parent_of(path));
}

void replace_dir(const std::string& staged, const std::string& target) {
  struct stat st;
  if (::lstat(target.c_str(), &st) != 0) {
    DICE_REQUIRE(std::rename(staged.c_str(), target.c_str()) == 0, "cannot rename '", staged, "' to '", target,
                 "': ", std::strerror(errno));
  } else {
    // One atomic swap where the file system has it (ext4, xfs, tmpfs, btrfs); else two renames
    // with the old folder kept aside until the new one is in place.
    if (::syscall(SYS_renameat2, AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
      std::string aside = str(target, ".old.", getpid());
      DICE_REQUIRE(std::rename(target.c_str(), aside.c_str()) == 0, "cannot move '", target, "' aside: ",
                   std::strerror(errno));
      if (std::rename(staged.c_str(), target.c_str()) != 0) {
        int err = errno;
        std::rename(aside.c_str(), target.c_str());
        throw Error(str("cannot rename '", staged, "' to '", target, "': ", std::strerror(err)));
      }
      remove_tree(aside);
    } else {
      remove_tree(staged);  // now holds the old folder
    }
  }
  fsync_path(parent_of(target));
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string make_temp_dir(const std::string& prefix, const std::string& base) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = str(!base.empty() ? base : tmp && *tmp ? tmp : "/tmp", "/", prefix, "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  DICE_REQUIRE(mkdtemp(buf.data()) != nullptr, "cannot create a temporary directory from '", templ,
               "': ", std::strerror(errno));
  return std::string(buf.data());
}

namespace {
thread_local std::vector<std::string>* t_unreadable = nullptr;

int remove_entry(const char* p, const struct stat*, int type, struct FTW*) {
  if (type == FTW_DP) ::rmdir(p);
  else if (type == FTW_DNR) t_unreadable->emplace_back(p);  // opened up and retried below
  else ::unlink(p);
  return 0;
}
}  // namespace

bool remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlink(path.c_str()) == 0;
  // Each round opens up the unreadable directories it met (one more level of 0-mode nesting);
  // it stops when a round meets none, or none it could open.
  for (int round = 0; round < 4096; ++round) {
    std::vector<std::string> unreadable;
    t_unreadable = &unreadable;
    nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS);
    t_unreadable = nullptr;
    bool opened = false;
    for (const auto& d : unreadable) opened = ::chmod(d.c_str(), 0700) == 0 || opened;
    if (!opened) break;
  }
  return ::lstat(path.c_str(), &st) != 0;
}

void clear_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& n : names) remove_tree(dir + "/" + n);
}

}  // namespace dice::fs
