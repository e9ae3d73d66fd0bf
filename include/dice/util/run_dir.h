#pragma once
// The contract of every run directory and output file of `dice` (eval, judge, sample, ckpt, train):
//
//   - checked writable before any work (ensure_writable_dir / ensure_writable_file);
//   - one run at a time: an exclusive lock (DirLock, flock on <dir>/.dice.lock holding "host pid");
//     a second run is refused naming the holder; a lock left by a dead process is taken over
//     (flock is released by the kernel when its holder dies);
//   - a fingerprint of what determines the results (fingerprint.json: key -> value); a rerun with
//     another fingerprint is refused with a sentence naming each differing key, unless asked to
//     start afresh (--fresh) or to continue anyway (--continue-anyway).
// Atomic replacement of files and folders is in dice/util/fs.h.
#include <map>
#include <optional>
#include <string>

namespace dice::run_dir {

// Creates `dir` (and its parents) and checks that a file can be created in it; otherwise a
// dice::Error naming `flag` (e.g. "--out") and the folder.
void ensure_writable_dir(const std::string& dir, const std::string& flag);
// An output file: not a folder, its folder exists (it is not created) and accepts new files.
void ensure_writable_file(const std::string& path, const std::string& flag);

// An exclusive advisory lock held for the object's lifetime. The lock file records the holder's
// host and pid; with remove_on_release the file is deleted when released (locks beside files).
class DirLock {
 public:
  DirLock() = default;
  // Locks `lock_path`; a dice::Error naming `what` and the holder when another process holds it.
  DirLock(const std::string& lock_path, const std::string& what, bool remove_on_release = false);
  ~DirLock();
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  void release();
  int fd_ = -1;
  std::string path_;
  bool remove_ = false;
};

// <dir>/.dice.lock for a run directory.
DirLock lock_dir(const std::string& dir, const std::string& what);
// <file>.lock beside an output file (removed when released).
DirLock lock_file(const std::string& file, const std::string& what);

using Fingerprint = std::map<std::string, std::string>;

inline constexpr const char* kFingerprintFile = "fingerprint.json";
inline constexpr const char* kLockFile = ".dice.lock";

std::optional<Fingerprint> read_fingerprint(const std::string& dir);
void write_fingerprint(const std::string& dir, const Fingerprint& fp);
// "checkpoint ('a' then, 'b' now), samples ('1' then, '2' now)": each differing key; "" when equal.
// Keys "about.K" are never compared: they are shown beside K's value (a path beside its digest).
std::string describe_differences(const Fingerprint& then, const Fingerprint& now);

// What a rerun into a folder that holds results does when its fingerprint differs.
enum class OnMismatch { kRefuse, kFresh, kContinue };
// From the --fresh / --continue-anyway flags (both: a dice::Error).
OnMismatch on_mismatch_from_flags(bool fresh, bool continue_anyway);

enum class Plan { kNew, kResume, kFresh };
// The resume decision for `dir` (rank 0, after the lock is held). `has_results`: the folder holds
// results of an earlier run. Refusals are dice::Errors naming what differs and the two flags.
// kFresh means the caller removes the old results (clear_results) before working.
Plan plan_resume(const std::string& dir, const Fingerprint& now, bool has_results, OnMismatch on_mismatch,
                 const std::string& what);
// Removes everything in dir except its lock file.
void clear_results(const std::string& dir);

}  // namespace dice::run_dir
