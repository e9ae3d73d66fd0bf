// Resumable JSONL sample store (see sample_store.h).
#include "dice/train/sample_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::train {
namespace stdfs = std::filesystem;

std::string sample_key(const std::string& task_id, int sample_id) { return task_id + "#" + std::to_string(sample_id); }

SampleStore::SampleStore(std::string out_dir, int rank) : out_dir_(std::move(out_dir)), rank_(rank) {
  std::error_code ec;
  stdfs::create_directories(out_dir_ + "/parts", ec);
  DICE_REQUIRE(!ec, "cannot create output folder '", out_dir_, "/parts': ", ec.message());
}

SampleStore::~SampleStore() {
  if (part_) std::fclose(part_);
}

std::vector<std::string> SampleStore::files() const {
  std::vector<std::string> out;
  if (fs::exists(out_dir_ + "/samples.jsonl")) out.push_back(out_dir_ + "/samples.jsonl");
  std::vector<std::string> parts;
  for (const auto& e : stdfs::directory_iterator(out_dir_ + "/parts"))
    if (e.path().extension() == ".jsonl") parts.push_back(e.path().string());
  std::sort(parts.begin(), parts.end());
  out.insert(out.end(), parts.begin(), parts.end());
  return out;
}

std::vector<nlohmann::json> SampleStore::read_all() const {
  std::vector<nlohmann::json> out;
  std::set<std::string> seen;
  for (const auto& f : files()) {
    fs::for_each_line(f, [&](int lineno, const std::string& line) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        // A record cut short by an interruption: it will be redone.
        log::warn("ignoring an incomplete record at ", f, ":", lineno, " (interrupted write); it will be redone");
        return;
      }
      if (!j.contains("task_id") || !j.contains("sample_id")) return;
      auto key = sample_key(j["task_id"].get<std::string>(), j["sample_id"].get<int>());
      if (seen.insert(key).second) out.push_back(std::move(j));
    });
  }
  return out;
}

std::set<std::string> SampleStore::done_keys() const {
  std::set<std::string> keys;
  for (const auto& j : read_all()) keys.insert(sample_key(j["task_id"].get<std::string>(), j["sample_id"].get<int>()));
  return keys;
}

void SampleStore::append(const nlohmann::json& record) {
  if (!part_) {
    std::string path = str(out_dir_, "/parts/samples.rank", rank_, ".jsonl");
    // A run killed mid-write leaves a partial last line: end it, so the next record starts clean.
    bool cut = false;
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
      cut = std::fseek(f, -1, SEEK_END) == 0 && std::fgetc(f) != '\n';
      std::fclose(f);
    }
    part_ = std::fopen(path.c_str(), "a");
    DICE_REQUIRE(part_ != nullptr, "cannot open '", path, "' for appending: ", std::strerror(errno));
    if (cut) std::fputc('\n', part_);
  }
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  DICE_REQUIRE(std::fwrite(line.data(), 1, line.size(), part_) == line.size() && std::fflush(part_) == 0,
               "cannot append to the sample store in '", out_dir_, "' (disk full?)");
}

std::vector<nlohmann::json> SampleStore::merge(const std::vector<std::string>& task_order) const {
  auto all = read_all();
  std::map<std::string, size_t> rank_of;
  for (size_t i = 0; i < task_order.size(); ++i) rank_of.emplace(task_order[i], i);
  auto order = [&](const nlohmann::json& j) {
    auto it = rank_of.find(j["task_id"].get<std::string>());
    return std::make_pair(it == rank_of.end() ? task_order.size() : it->second, j["sample_id"].get<int>());
  };
  std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::string text;
  for (const auto& j : all) text += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  fs::write_file_atomic(out_dir_ + "/samples.jsonl", text);
  return all;
}

}  // namespace dice::train
