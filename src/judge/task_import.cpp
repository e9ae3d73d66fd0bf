// Task importers: KernelBench checkout, DICE rl_data JSON, CuKe / alpaca JSON.
//   nlohmann/json: record parsing; <filesystem>: the KernelBench level folders
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "dice/judge/task.h"
#include "dice/text/chat.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::judge {

namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

// A JSON array of records, or JSONL (one object per line). Each record comes with "file:line" or
// "file[i]" for error messages.
std::vector<std::pair<json, std::string>> read_records(const std::string& path) {
  const std::string text = fs::read_file(path);
  std::vector<std::pair<json, std::string>> out;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return out;
  if (text[first] == '[') {
    json arr;
    try {
      arr = json::parse(text);
    } catch (const json::parse_error& e) {
      throw Error(str(path, ": not valid JSON (", e.what(), ")"));
    }
    for (size_t i = 0; i < arr.size(); ++i) out.emplace_back(arr[i], str(path, "[", i, "]"));
    return out;
  }
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(path, ":", line_no);
    try {
      out.emplace_back(json::parse(line), where);
    } catch (const json::parse_error& e) {
      throw Error(str(where, ": not valid JSON (", e.what(), ")"));
    }
  }
  return out;
}

std::string req_string(const json& r, const char* key, const std::string& where) {
  DICE_REQUIRE(r.is_object(), where, ": a record must be a JSON object");
  auto it = r.find(key);
  DICE_REQUIRE(it != r.end(), where, ": record has no '", key, "' field");
  DICE_REQUIRE(it->is_string(), where, ": field '", key, "' must be a string");
  return it->get<std::string>();
}

// An id component from a JSON value (string or integer).
std::string id_part(const json& v, const char* key, const std::string& where) {
  if (v.is_string() && !v.get<std::string>().empty()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  throw Error(str(where, ": field '", key, "' must be a non-empty string or an integer"));
}

int level_of(const json& r, const std::string& where, int fallback) {
  auto it = r.find("level");
  if (it == r.end()) return fallback;
  if (it->is_string()) {  // some dumps write "1"
    try {
      return std::stoi(it->get<std::string>());
    } catch (...) {
    }
  }
  DICE_REQUIRE(it->is_number_integer(), where, ": field 'level' must be an integer");
  return it->get<int>();
}

// difficulty = level + i / n within each level, in input order
void assign_difficulty(std::vector<Task>& tasks) {
  std::map<int, int> count, seen;
  for (const auto& t : tasks) count[t.level]++;
  for (auto& t : tasks) t.difficulty = t.level + static_cast<double>(seen[t.level]++) / count[t.level];
}

bool defines(const std::string& code, const std::string& what) { return code.find(what) != std::string::npos; }

}  // namespace

std::string extract_pytorch_reference(const std::string& prompt) {
  const auto blocks = text::code_blocks(prompt);
  for (const auto& b : blocks)
    if (defines(b.code, "class Model(") && defines(b.code, "get_inputs")) return b.code;
  for (const auto& b : blocks)
    if (defines(b.code, "class Model(")) return b.code;
  if (!blocks.empty()) return "";
  size_t pos = 0;
  while (pos < prompt.size()) {
    if (prompt.compare(pos, 7, "import ") == 0 || prompt.compare(pos, 5, "from ") == 0) {
      std::string rest = prompt.substr(pos);
      return defines(rest, "class Model(") ? rest : "";
    }
    size_t nl = prompt.find('\n', pos);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return "";
}

std::vector<Task> import_kernelbench(const std::string& dir, const std::vector<int>& levels) {
  stdfs::path root(dir);
  DICE_REQUIRE(stdfs::is_directory(root), "KernelBench directory '", dir, "' does not exist");
  if (stdfs::is_directory(root / "KernelBench")) root /= "KernelBench";
  std::vector<Task> out;
  for (int level : levels) {
    const stdfs::path ldir = root / ("level" + std::to_string(level));
    DICE_REQUIRE(stdfs::is_directory(ldir), "KernelBench level folder '", ldir.string(),
                 "' does not exist (expected a checkout with KernelBench/level1, level2, level3)");
    std::vector<std::pair<long, stdfs::path>> files;
    for (const auto& e : stdfs::directory_iterator(ldir)) {
      if (!e.is_regular_file() || e.path().extension() != ".py") continue;
      const std::string stem = e.path().stem().string();
      size_t digits = 0;
      while (digits < stem.size() && std::isdigit(static_cast<unsigned char>(stem[digits]))) ++digits;
      if (digits == 0 || digits >= stem.size() || stem[digits] != '_') {
        log::warn("skipping ", e.path().string(), ": not a <N>_<Name>.py problem file");
        continue;
      }
      files.emplace_back(std::stol(stem.substr(0, digits)), e.path());
    }
    std::sort(files.begin(), files.end());
    DICE_REQUIRE(!files.empty(), "KernelBench level folder '", ldir.string(), "' holds no <N>_<Name>.py problems");
    for (size_t i = 0; i < files.size(); ++i) {
      Task t;
      t.id = str("kb_L", level, "_", files[i].second.stem().string());
      t.level = level;
      t.difficulty = level + static_cast<double>(i) / files.size();
      t.reference = fs::read_file(files[i].second.string());
      DICE_REQUIRE(defines(t.reference, "class Model"), files[i].second.string(), ": no 'class Model' in the problem file");
      t.device = "cuda";
      out.push_back(std::move(t));
    }
  }
  check_unique_ids(out, str("KernelBench import of ", dir));
  return out;
}

std::vector<Task> import_dice_rl(const std::string& path) {
  std::vector<Task> out;
  for (const auto& [r, where] : read_records(path)) {
    DICE_REQUIRE(r.is_object(), where, ": a record must be a JSON object");
    Task t;
    t.device = "cuda";
    t.reference = req_string(r, "pytorch_code", where);
    t.solution = req_string(r, "cuda_code", where);
    DICE_REQUIRE(!t.reference.empty(), where, ": field 'pytorch_code' is empty");
    if (r.contains("middle") || r.contains("prefix") || r.contains("suffix")) {
      DICE_REQUIRE(r.contains("id"), where, ": infilling record has no 'id' field");
      const std::string prefix = req_string(r, "prefix", where);
      const std::string middle = req_string(r, "middle", where);
      const std::string suffix = req_string(r, "suffix", where);
      DICE_REQUIRE(prefix + middle + suffix == t.solution, where,
                   ": prefix + middle + suffix differs from cuda_code (the infill split is inconsistent)");
      t.id = "dice_infill_" + id_part(r["id"], "id", where);
      t.level = level_of(r, where, 1);
      t.infill = Infill{prefix, suffix};
    } else {
      DICE_REQUIRE(r.contains("idx"), where, ": end-to-end record has no 'idx' field");
      DICE_REQUIRE(r.contains("level"), where, ": end-to-end record has no 'level' field");
      t.level = level_of(r, where, 1);
      t.id = str("dice_L", t.level, "_", id_part(r["idx"], "idx", where));
    }
    out.push_back(std::move(t));
  }
  assign_difficulty(out);
  check_unique_ids(out, str("DICE rl_data import of ", path));
  return out;
}

std::vector<Task> import_cuke(const std::string& path, int* skipped) {
  std::vector<Task> out;
  int skip = 0;
  size_t index = 0;
  for (const auto& [r, where] : read_records(path)) {
    DICE_REQUIRE(r.is_object(), where, ": a record must be a JSON object");
    std::string prompt, response;
    if (r.contains("instruction") || r.contains("output")) {
      prompt = req_string(r, "instruction", where);
      if (r.contains("input")) {
        const std::string input = req_string(r, "input", where);
        if (!input.empty()) prompt += "\n" + input;
      }
      response = req_string(r, "output", where);
    } else if (r.contains("prompt") || r.contains("response")) {
      prompt = req_string(r, "prompt", where);
      response = req_string(r, "response", where);
    } else {
      throw Error(str(where, ": record has neither instruction/input/output nor prompt/response fields"));
    }
    Task t;
    t.id = str("cuke_", index++);
    t.level = level_of(r, where, 1);
    t.device = "cuda";
    t.reference = extract_pytorch_reference(prompt);
    if (t.reference.empty()) {
      ++skip;
      continue;
    }
    // the code the judge would take from this response (text::extract_code_block)
    if (auto block = text::extract_code_block(response)) t.solution = block->code;
    else if (defines(response, "class ModelNew")) t.solution = response;
    out.push_back(std::move(t));
  }
  if (skip > 0) log::warn(path, ": skipped ", skip, " record(s) whose prompt holds no PyTorch reference (class Model)");
  if (skipped) *skipped = skip;
  assign_difficulty(out);
  return out;
}

}  // namespace dice::judge
