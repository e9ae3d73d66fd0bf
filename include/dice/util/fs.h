#pragma once
// Small file helpers with errors that name the file.
#include <string>

namespace dice::fs {

std::string read_file(const std::string& path);  // throws dice::Error naming the path
void write_file(const std::string& path, const std::string& data);
// Writes to path.tmp.<pid> then renames: readers never see a half-written file.
void write_file_atomic(const std::string& path, const std::string& data);
bool exists(const std::string& path);
std::string make_temp_dir(const std::string& prefix);  // under $TMPDIR or /tmp

}  // namespace dice::fs
