// Task store: JSONL read/write of DESIGN §4 task records.
//   nlohmann/json: parsing and printing one record per line
//   dice/util/fs.h: whole-file reads, atomic writes
#include "dice/judge/task.h"

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::judge {

namespace {

using json = nlohmann::json;

const char* json_type(const json& v) { return v.type_name(); }

std::string get_string(const json& obj, const char* key, const std::string& where, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    DICE_REQUIRE(!required, where, ": task has no '", key, "' field");
    return "";
  }
  DICE_REQUIRE(it->is_string(), where, ": field '", key, "' must be a string, got ", json_type(*it));
  return it->get<std::string>();
}

}  // namespace

Task parse_task_line(const std::string& line, const std::string& where) {
  json obj;
  try {
    obj = json::parse(line);
  } catch (const json::parse_error& e) {
    throw Error(str(where, ": not valid JSON (", e.what(), ")"));
  }
  DICE_REQUIRE(obj.is_object(), where, ": a task must be a JSON object, got ", json_type(obj));
  static const char* kKeys[] = {"id", "level", "difficulty", "reference", "infill", "solution", "device",
                                "wrong_solutions"};
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known = known || it.key() == k;
    DICE_REQUIRE(known, where, ": unknown field '", it.key(),
                 "' (expected id, level, difficulty, reference, infill, solution, device, wrong_solutions)");
  }
  Task t;
  t.id = get_string(obj, "id", where, true);
  DICE_REQUIRE(!t.id.empty(), where, ": field 'id' is empty");
  auto lv = obj.find("level");
  DICE_REQUIRE(lv != obj.end(), where, ": task '", t.id, "' has no 'level' field");
  DICE_REQUIRE(lv->is_number_integer(), where, ": field 'level' must be an integer, got ", lv->dump());
  t.level = lv->get<int>();
  DICE_REQUIRE(t.level >= 0, where, ": field 'level' must be >= 0, got ", t.level);
  auto df = obj.find("difficulty");
  DICE_REQUIRE(df != obj.end(), where, ": task '", t.id, "' has no 'difficulty' field");
  DICE_REQUIRE(df->is_number(), where, ": field 'difficulty' must be a number, got ", df->dump());
  t.difficulty = df->get<double>();
  t.reference = get_string(obj, "reference", where, true);
  DICE_REQUIRE(!t.reference.empty(), where, ": field 'reference' of task '", t.id, "' is empty");
  t.solution = get_string(obj, "solution", where, false);
  if (obj.contains("device")) {
    t.device = get_string(obj, "device", where, true);
    DICE_REQUIRE(t.device == "cuda" || t.device == "cpu", where, ": field 'device' must be \"cuda\" or \"cpu\", got \"",
                 t.device, "\"");
  }
  auto in = obj.find("infill");
  if (in != obj.end() && !in->is_null()) {
    DICE_REQUIRE(in->is_object(), where, ": field 'infill' must be an object {prefix, suffix}, got ", json_type(*in));
    for (auto it = in->begin(); it != in->end(); ++it)
      DICE_REQUIRE(it.key() == "prefix" || it.key() == "suffix", where, ": unknown field 'infill.", it.key(), "'");
    Infill f;
    f.prefix = get_string(*in, "prefix", where + " (infill)", true);
    f.suffix = get_string(*in, "suffix", where + " (infill)", true);
    t.infill = std::move(f);
  }
  auto ws = obj.find("wrong_solutions");
  if (ws != obj.end() && !ws->is_null()) {
    DICE_REQUIRE(ws->is_array(), where, ": field 'wrong_solutions' must be an array of {kind, code}, got ",
                 json_type(*ws));
    for (size_t i = 0; i < ws->size(); ++i) {
      const json& w = (*ws)[i];
      const std::string at = str(where, " (wrong_solutions[", i, "])");
      DICE_REQUIRE(w.is_object(), at, ": must be an object {kind, code}, got ", json_type(w));
      for (auto it = w.begin(); it != w.end(); ++it)
        DICE_REQUIRE(it.key() == "kind" || it.key() == "code", at, ": unknown field '", it.key(), "'");
      WrongSolution s{get_string(w, "kind", at, true), get_string(w, "code", at, true)};
      DICE_REQUIRE(!s.code.empty() && s.code != t.solution, at, ": the code is empty or the solution itself");
      t.wrong_solutions.push_back(std::move(s));
    }
  }
  return t;
}

std::string task_to_json_line(const Task& t) {
  // ordered_json keeps the documented key order, which makes files diff-friendly
  nlohmann::ordered_json obj;
  obj["id"] = t.id;
  obj["level"] = t.level;
  obj["difficulty"] = t.difficulty;
  obj["reference"] = t.reference;
  if (t.infill) obj["infill"] = {{"prefix", t.infill->prefix}, {"suffix", t.infill->suffix}};
  if (!t.solution.empty()) obj["solution"] = t.solution;
  obj["device"] = t.device;
  if (!t.wrong_solutions.empty()) {
    obj["wrong_solutions"] = nlohmann::ordered_json::array();
    for (const auto& w : t.wrong_solutions) obj["wrong_solutions"].push_back({{"kind", w.kind}, {"code", w.code}});
  }
  return obj.dump(-1, ' ', false, json::error_handler_t::replace);
}

void check_unique_ids(const std::vector<Task>& tasks, const std::string& what) {
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < tasks.size(); ++i) {
    DICE_REQUIRE(!tasks[i].id.empty(), what, ": task #", i + 1, " has an empty id");
    auto [it, fresh] = first.emplace(tasks[i].id, i);
    DICE_REQUIRE(fresh, what, ": duplicate task id '", tasks[i].id, "' (tasks #", it->second + 1, " and #", i + 1, ")");
  }
}

std::vector<Task> load_tasks(const std::string& path) {
  std::vector<Task> tasks;
  std::map<std::string, int> line_of;
  fs::for_each_line(path, [&](int line_no, const std::string& line) {
    const std::string where = str(path, ":", line_no);
    Task t = parse_task_line(line, where);
    auto [it, fresh] = line_of.emplace(t.id, line_no);
    DICE_REQUIRE(fresh, where, ": duplicate task id '", t.id, "' (first on line ", it->second, ")");
    tasks.push_back(std::move(t));
  });
  return tasks;
}

void save_tasks(const std::string& path, const std::vector<Task>& tasks) {
  check_unique_ids(tasks, str("tasks for ", path));
  std::string out;
  for (const auto& t : tasks) {
    DICE_REQUIRE(t.device == "cuda" || t.device == "cpu", "task '", t.id, "' has device \"", t.device,
                 "\"; it must be \"cuda\" or \"cpu\"");
    out += task_to_json_line(t);
    out += '\n';
  }
  fs::write_file_atomic(path, out);
}

}  // namespace dice::judge
