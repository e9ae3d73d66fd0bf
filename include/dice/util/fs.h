#pragma once
// Small file helpers with errors that name the file.
#include <functional>
#include <string>

namespace dice::fs {

std::string read_file(const std::string& path);  // throws dice::Error naming the path
// Calls fn(line number from 1, line) for each non-blank line of a text file (a trailing '\r' is
// dropped): the loop of every JSONL reader. Throws dice::Error naming the path when unreadable.
void for_each_line(const std::string& path, const std::function<void(int, const std::string&)>& fn);
void write_file(const std::string& path, const std::string& data);
// Writes to path.tmp.<pid>, fsyncs, renames over path, fsyncs the folder: readers never see a
// half-written file, and when the write fails (disk full) the old file stays and no .tmp is left.
void write_file_atomic(const std::string& path, const std::string& data);
// Puts the fully written folder `staged` in the place of `target` (atomic swap where the file
// system supports it); the old target is removed only once the new one is in place.
void replace_dir(const std::string& staged, const std::string& target);
void fsync_path(const std::string& path);  // a file or a folder; errors ignored
bool exists(const std::string& path);
std::string make_temp_dir(const std::string& prefix, const std::string& base = "");  // under base, else $TMPDIR or /tmp

// Removes path and everything below it (symlinks are removed, never followed; unreadable
// directories are opened up first). True when nothing is left. Use this, not
// std::filesystem::remove_all: PyTorch's pip wheels export their own copy of that symbol (from
// libstdc++_nonshared), it wins the dynamic lookup in any binary linked with LibTorch, and it
// crashes (a call through a null pointer) on the GPU node.
bool remove_tree(const std::string& path);
// Removes everything inside dir, keeping dir.
void clear_dir(const std::string& dir);

}  // namespace dice::fs
