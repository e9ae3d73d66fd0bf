// VerdictMemo (verdict_memo.h): verdicts of identical candidates, in memory and under a directory.
#include "dice/judge/verdict_memo.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "dice/judge/compile_pool.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/log.h"

namespace dice::judge {

VerdictMemo::VerdictMemo(std::string identity, std::string dir) : identity_(std::move(identity)), dir_(std::move(dir)) {}

std::string VerdictMemo::key(const Task& task, const std::string& code) const {
  hash::Sha256 h;
  for (const std::string& part : {identity_, task.id, task.device, std::to_string(task.level), task.reference, code}) {
    h.update(std::to_string(part.size()) + ":");  // lengths first: no two splits hash alike
    h.update(part);
  }
  return h.hex_digest().substr(0, 40);
}

bool VerdictMemo::keepable(const Verdict& v) {
  if (v.reused || shows_machine_limit(v.log_tail)) return false;  // e.g. a compiler or a device out of memory
  switch (v.failure) {
    case Failure::kNone:
    case Failure::kCompileError:
    case Failure::kLoadError:
    case Failure::kWrongShape:
    case Failure::kWrongValue:
    case Failure::kInputMutated:
    case Failure::kNondeterministic:
    case Failure::kNoOwnKernel:
    case Failure::kLeftoverProcess:
    case Failure::kTimingTampered:
    case Failure::kRuntimeError:
      return true;
    default:
      return false;
  }
}

std::optional<Verdict> VerdictMemo::find(const std::string& key, const std::string& task_id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = kept_.find(key);
    if (it != kept_.end()) return it->second.task_id == task_id ? std::optional<Verdict>(it->second) : std::nullopt;
  }
  if (dir_.empty()) return std::nullopt;
  std::string text;
  if (!read_kept_file(str(dir_, "/", key.substr(0, 2), "/", key, ".json"), text)) return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, false);
  Verdict v;
  try {
    if (j.is_discarded()) return std::nullopt;
    v = j.get<Verdict>();
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: judged again, and written anew
  }
  if (v.task_id != task_id || !keepable(v)) return std::nullopt;
  std::lock_guard<std::mutex> lk(mu_);
  kept_.emplace(key, v);
  return v;
}

void VerdictMemo::put(const std::string& key, const Verdict& v) {
  if (!keepable(v)) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!kept_.emplace(key, v).second) return;
  }
  if (dir_.empty()) return;
  try {
    const std::string sub = str(dir_, "/", key.substr(0, 2));
    std::error_code ec;
    std::filesystem::create_directories(sub, ec);
    chmod(dir_.c_str(), 0755);
    chmod(sub.c_str(), 0755);
    const std::string path = str(sub, "/", key, ".json");
    const std::string tmp = str(path, ".tmp.", getpid(), ".", std::hash<std::thread::id>{}(std::this_thread::get_id()));
    nlohmann::json j = v;
    j.erase("same_as");
    fs::write_file(tmp, j.dump());
    chmod(tmp.c_str(), 0644);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
  } catch (const std::exception& e) {  // a full disk costs only the reuse, never the verdict
    log::warn("judge: could not keep a verdict under ", dir_, ": ", e.what());
  }
}

}  // namespace dice::judge
