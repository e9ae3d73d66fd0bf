// File helpers.
#include "dice/util/fs.h"

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

}  // namespace dice::fs
