// File helpers.
#include "dice/util/fs.h"

#include <dirent.h>
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

void write_file_atomic(const std::string& path, const std::string& data) {
  std::string tmp = str(path, ".tmp.", getpid());
  write_file(tmp, data);
  DICE_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path,
               "': ", std::strerror(errno));
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string make_temp_dir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = str(base && *base ? base : "/tmp", "/", prefix, "XXXXXX");
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
