// Checkpoint directories: atomic commit, discovery, keep-last-K, loading, description.
#include "dice/ckpt/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::ckpt {

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kComplete = "COMPLETE";
constexpr const char* kModelFile = "model.h5";
constexpr const char* kStateFile = "state.h5";

std::string optim_file(int rank) { return str("optim_rank", rank, ".h5"); }

// Parses "step_000120" (and "step_000120.tmp" when allow_tmp) into 120; -1 otherwise.
int64_t parse_step_dir(const std::string& name, bool* is_tmp) {
  const std::string prefix = "step_";
  if (name.rfind(prefix, 0) != 0) return -1;
  std::string rest = name.substr(prefix.size());
  *is_tmp = false;
  if (rest.size() > 4 && rest.compare(rest.size() - 4, 4, ".tmp") == 0) {
    *is_tmp = true;
    rest.resize(rest.size() - 4);
  }
  if (rest.empty() || rest.size() > 18 || !std::all_of(rest.begin(), rest.end(), ::isdigit)) return -1;
  return std::stoll(rest);
}

struct StepDir {
  int64_t step;
  bool tmp;
  stdfs::path path;
};

// step_* entries of run_dir, newest first.
std::vector<StepDir> list_step_dirs(const std::string& run_dir) {
  std::vector<StepDir> out;
  std::error_code ec;
  if (!stdfs::is_directory(run_dir, ec)) return out;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec)) {
    bool tmp = false;
    int64_t step = parse_step_dir(e.path().filename().string(), &tmp);
    if (step >= 0 && e.is_directory(ec)) out.push_back({step, tmp, e.path()});
  }
  std::sort(out.begin(), out.end(), [](const StepDir& a, const StepDir& b) {
    return a.step != b.step ? a.step > b.step : a.tmp < b.tmp;
  });
  return out;
}

void fsync_path(const stdfs::path& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_model_file(const std::string& path, const NamedTensors& model) {
  Store s = Store::create(path, "model");
  s.write_tensors("", model);
  s.close();
}

void write_optim_file(const std::string& path, int rank, const OptimState& optim) {
  Store s = Store::create(path, "optim");
  s.write_i64("step", optim.step);
  s.write_i64("rank", rank);
  s.write_tensors("m", optim.m);
  s.write_tensors("v", optim.v);
  s.close();
}

void write_state_file(const std::string& path, const TrainState& st) {
  Store s = Store::create(path, "state");
  s.write_i64("format_version", kFormatVersion);
  s.write_i64("step", st.step);
  s.write_string("stage", st.stage);
  s.write_i64("cursor", st.cursor);
  s.write_i64("policy_version", st.policy_version);
  for (const auto& [rank, bytes] : st.rng) s.write_bytes(str("rng/rank", rank), bytes);
  s.write_string("metrics_json", st.metrics_json);
  s.write_string("config_yaml", st.config_yaml);
  s.close();
}

std::string kind_of(const std::string& file) {
  if (file == kModelFile) return "model";
  if (file == kStateFile) return "state";
  return "optim";
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

json read_complete(const stdfs::path& dir) {
  std::string text = fs::read_file((dir / kComplete).string());
  json j = json::parse(text, nullptr, false);
  DICE_REQUIRE(!j.is_discarded() && j.is_object() && j.contains("files") && j["files"].is_array(),
               "checkpoint ", dir.string(), " has an unreadable COMPLETE marker");
  return j;
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

namespace {

// Leader, phase 1: a fresh step_N.tmp/ (a stale one from a crashed attempt is removed).
stdfs::path begin_tmp(const std::string& run_dir, int64_t step) {
  DICE_REQUIRE(step >= 0, "checkpoint step must be >= 0, got ", step);
  const stdfs::path tmp_dir = stdfs::path(run_dir) / (step_dir_name(step) + ".tmp");
  std::error_code ec;
  stdfs::create_directories(run_dir, ec);
  fs::remove_tree(tmp_dir);
  DICE_REQUIRE(stdfs::create_directories(tmp_dir, ec), "cannot create checkpoint directory ", tmp_dir.string(), ": ",
               ec.message().empty() ? "it already exists" : ec.message());
  return tmp_dir;
}

// Leader, phase 2: model, state and the copied files.
void write_leader_files(const stdfs::path& tmp_dir, const NamedTensors& model, const TrainState& state,
                        const std::vector<std::string>& copy_files) {
  write_model_file((tmp_dir / kModelFile).string(), model);
  write_state_file((tmp_dir / kStateFile).string(), state);
  std::error_code ec;
  for (const auto& src : copy_files) {
    if (!stdfs::is_regular_file(src)) continue;
    stdfs::copy_file(src, tmp_dir / stdfs::path(src).filename(), stdfs::copy_options::overwrite_existing, ec);
    DICE_REQUIRE(!ec, "cannot copy ", src, " into checkpoint ", tmp_dir.string(), ": ", ec.message());
  }
}

// Leader, phase 3 (after every rank's files are written): fsync, rename, COMPLETE, prune.
std::string commit(const std::string& run_dir, int64_t step, int keep_last) {
  const stdfs::path final_dir = stdfs::path(run_dir) / step_dir_name(step);
  const stdfs::path tmp_dir = stdfs::path(final_dir.string() + ".tmp");
  std::vector<std::string> files;
  for (const auto& e : stdfs::directory_iterator(tmp_dir)) {
    fsync_path(e.path(), false);
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  fsync_path(tmp_dir, true);
  std::error_code ec;
  if (stdfs::exists(final_dir)) fs::remove_tree(final_dir);
  stdfs::rename(tmp_dir, final_dir, ec);
  DICE_REQUIRE(!ec, "cannot rename ", tmp_dir.string(), " to ", final_dir.string(), ": ", ec.message());
  json complete = {{"format_version", kFormatVersion}, {"step", step}, {"files", files}};
  fs::write_file_atomic((final_dir / kComplete).string(), complete.dump() + "\n");
  fsync_path(final_dir, true);
  fsync_path(run_dir, true);
  log::info("checkpoint: saved ", final_dir.string());
  if (keep_last > 0) prune_checkpoints(run_dir, keep_last);
  return final_dir.string();
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, int64_t step, const NamedTensors& model,
                            const OptimState* optim, const TrainState& state, const SaveOptions& opts) {
  const stdfs::path tmp_dir = stdfs::path(run_dir) / (step_dir_name(step) + ".tmp");
  if (opts.leader) begin_tmp(run_dir, step);
  opts.barrier();
  if (optim) write_optim_file((tmp_dir / optim_file(opts.rank)).string(), opts.rank, *optim);
  if (opts.leader) write_leader_files(tmp_dir, model, state, opts.copy_files);
  opts.barrier();
  if (opts.leader) commit(run_dir, step, opts.keep_last);
  opts.barrier();
  return (stdfs::path(run_dir) / step_dir_name(step)).string();
}

std::string save_checkpoint(const std::string& run_dir, int64_t step, const NamedTensors& model,
                            const std::map<int, OptimState>& optim_by_rank, const TrainState& state,
                            int keep_last, const std::function<void()>& barrier) {
  stdfs::path tmp_dir = begin_tmp(run_dir, step);
  for (const auto& [rank, optim] : optim_by_rank) write_optim_file((tmp_dir / optim_file(rank)).string(), rank, optim);
  write_leader_files(tmp_dir, model, state, {});
  barrier();
  return commit(run_dir, step, keep_last);
}

NamedTensors load_model(const std::string& ckpt_dir, bool verify) {
  Store s = Store::open((stdfs::path(ckpt_dir) / kModelFile).string(), "model");
  return s.read_tensors("", verify);
}

std::vector<TensorInfo> list_model_tensors(const std::string& ckpt_dir) {
  Store s = Store::open((stdfs::path(ckpt_dir) / kModelFile).string(), "model");
  return s.list_tensors("");
}

TrainState load_state(const std::string& ckpt_dir, bool verify) {
  Store s = Store::open((stdfs::path(ckpt_dir) / kStateFile).string(), "state");
  int64_t version = s.read_i64("format_version", verify);
  DICE_REQUIRE(version == kFormatVersion, "checkpoint ", ckpt_dir, " has state format version ", version,
               ", but this dice reads format version ", kFormatVersion);
  TrainState st;
  st.step = s.read_i64("step", verify);
  st.stage = s.read_string("stage", verify);
  st.cursor = s.read_i64("cursor", verify);
  st.policy_version = s.read_i64("policy_version", verify);
  for (const auto& name : s.list("rng")) {
    DICE_REQUIRE(name.rfind("rank", 0) == 0 && name.size() > 4, "checkpoint ", s.path(), " has an unexpected RNG entry '",
                 name, "'");
    st.rng[std::stoi(name.substr(4))] = s.read_bytes("rng/" + name, verify);
  }
  st.metrics_json = s.read_string("metrics_json", verify);
  st.config_yaml = s.read_string("config_yaml", verify);
  return st;
}

OptimState load_optim(const std::string& ckpt_dir, int rank, bool verify) {
  const std::string path = (stdfs::path(ckpt_dir) / optim_file(rank)).string();
  if (!stdfs::is_regular_file(path)) {
    std::string have;
    for (int r : optim_ranks(ckpt_dir)) have += (have.empty() ? "" : ", ") + std::to_string(r);
    throw Error(str("checkpoint ", ckpt_dir, " has no optimizer state for learner rank ", rank, " (", optim_file(rank),
                    "); it holds ranks [", have, "] — resume with the same number of learners"));
  }
  Store s = Store::open(path, "optim");
  OptimState o;
  o.step = s.read_i64("step", verify);
  o.m = s.read_tensors("m", verify);
  o.v = s.read_tensors("v", verify);
  return o;
}

std::vector<int> optim_ranks(const std::string& ckpt_dir) {
  std::vector<int> ranks;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(ckpt_dir, ec)) {
    std::string n = e.path().filename().string();
    const std::string pre = "optim_rank", suf = ".h5";
    if (n.size() <= pre.size() + suf.size() || n.rfind(pre, 0) != 0 || n.compare(n.size() - 3, 3, suf) != 0) continue;
    std::string digits = n.substr(pre.size(), n.size() - pre.size() - suf.size());
    if (std::all_of(digits.begin(), digits.end(), ::isdigit)) ranks.push_back(std::stoi(digits));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::vector<std::string> check_checkpoint(const std::string& ckpt_dir, bool verify) {
  std::vector<std::string> reasons;
  const stdfs::path dir(ckpt_dir);
  std::error_code ec;
  if (!stdfs::is_directory(dir, ec)) return {str(ckpt_dir, " is not a directory")};
  bool tmp = false;
  parse_step_dir(dir.filename().string(), &tmp);
  if (tmp) return {"its write never finished (still named .tmp)"};
  if (!stdfs::exists(dir / kComplete)) return {"it has no COMPLETE marker (the write did not finish)"};
  json complete;
  try {
    complete = read_complete(dir);
  } catch (const Error& e) {
    return {e.what()};
  }
  int64_t version = complete.value("format_version", int64_t{-1});
  if (version != kFormatVersion)
    return {str("it has checkpoint format version ", version, ", but this dice reads format version ", kFormatVersion)};
  std::vector<std::string> files = complete["files"].get<std::vector<std::string>>();
  for (const char* required : {kModelFile, kStateFile})
    if (std::find(files.begin(), files.end(), required) == files.end())
      reasons.push_back(str("its COMPLETE marker does not list ", required));
  for (const auto& f : files) {
    if (f.size() < 3 || f.compare(f.size() - 3, 3, ".h5") != 0) {
      if (!stdfs::exists(dir / f)) reasons.push_back(str("file ", (dir / f).string(), " is missing"));
      continue;
    }
    try {
      Store s = Store::open((dir / f).string(), kind_of(f));
      if (verify)
        for (auto& failure : s.verify_all()) reasons.push_back(std::move(failure));
    } catch (const Error& e) {
      reasons.push_back(e.what());
    }
  }
  return reasons;
}

std::optional<std::string> find_latest_complete(const std::string& run_dir, bool verify) {
  for (const auto& d : list_step_dirs(run_dir)) {
    std::vector<std::string> reasons = check_checkpoint(d.path.string(), verify);
    if (reasons.empty()) return d.path.string();
    std::string why;
    for (const auto& r : reasons) why += (why.empty() ? "" : "; ") + r;
    log::warn("skipping checkpoint ", d.path.string(), ": ", why);
  }
  return std::nullopt;
}

std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep_last) {
  std::vector<std::string> deleted;
  if (keep_last <= 0) return deleted;
  int kept = 0;
  int64_t oldest_kept = -1;
  std::error_code ec;
  auto dirs = list_step_dirs(run_dir);
  for (const auto& d : dirs) {
    if (d.tmp || !stdfs::exists(d.path / kComplete)) continue;
    if (kept < keep_last) {
      ++kept;
      oldest_kept = d.step;
      continue;
    }
    fs::remove_tree(d.path);
    deleted.push_back(d.path.string());
  }
  // Unfinished writes older than the checkpoints we keep can never complete: remove them too.
  for (const auto& d : dirs) {
    if (oldest_kept < 0 || d.step >= oldest_kept) continue;
    if (d.tmp || !stdfs::exists(d.path / kComplete)) {
      if (!stdfs::exists(d.path)) continue;
      fs::remove_tree(d.path);
      deleted.push_back(d.path.string());
    }
  }
  for (const auto& p : deleted) log::info("checkpoint: removed ", p, " (keep_last ", keep_last, ")");
  return deleted;
}

std::string describe(const std::string& ckpt_dir, bool verify, bool* verified_ok) {
  const stdfs::path dir(ckpt_dir);
  DICE_REQUIRE(stdfs::is_directory(dir), "checkpoint ", ckpt_dir, " is not a directory");
  if (verified_ok) *verified_ok = true;
  std::ostringstream os;
  auto row = [&](const char* key, const std::string& value) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%-12s", key);
    os << buf << value << "\n";
  };
  row("checkpoint", dir.string());
  bool complete = stdfs::exists(dir / kComplete);
  row("complete", complete ? "yes (COMPLETE marker present)" : "NO (no COMPLETE marker: partial write)");

  TrainState st = load_state(ckpt_dir, false);
  row("format", str("version ", kFormatVersion));
  row("step", str(st.step, "   stage '", st.stage, "'   cursor ", st.cursor, "   policy version ", st.policy_version));

  auto tensors = list_model_tensors(ckpt_dir);
  int64_t params = 0, bytes = 0;
  std::map<std::string, int> dtypes;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
    bytes += t.bytes;
    ++dtypes[dtype_name(t.dtype)];
  }
  std::string dtype_text;
  for (const auto& [name, n] : dtypes) dtype_text += str(dtype_text.empty() ? "" : ", ", name, ": ", n);
  row("model", str(tensors.size(), " tensors, ", human_count(static_cast<double>(params)), " parameters, ",
                   human_bytes(static_cast<double>(bytes)), " (", dtype_text, ")"));

  const stdfs::path config = dir / "config.json";
  if (stdfs::exists(config)) {
    json c = json::parse(fs::read_file(config.string()), nullptr, false);
    if (c.is_object()) {
      auto get = [&](const char* k) { return c.contains(k) ? c[k].dump() : std::string("?"); };
      row("config", str(c.value("model_type", std::string("?")), ": hidden ", get("hidden_size"), ", ",
                        get("num_hidden_layers"), " layers, ", get("num_attention_heads"), "/",
                        get("num_key_value_heads"), " heads, head_dim ", get("head_dim"), ", ffn ",
                        get("intermediate_size"), ", vocab ", get("vocab_size"), " (config.json)"));
    } else {
      row("config", "config.json is not valid JSON");
    }
  } else {
    row("config", "no config.json in the checkpoint");
  }

  auto ranks = optim_ranks(ckpt_dir);
  if (ranks.empty()) {
    row("optimizer", "none");
  } else {
    std::string rank_text;
    for (int r : ranks) rank_text += str(rank_text.empty() ? "" : ",", r);
    Store s = Store::open((dir / optim_file(ranks.front())).string(), "optim");
    row("optimizer", str("learner ranks ", rank_text, " (AdamW step ", s.read_i64("step", false), "; rank ",
                         ranks.front(), ": ", s.list("m").size(), " tensors)"));
  }
  std::string rng_text;
  for (const auto& [r, b] : st.rng) rng_text += str(rng_text.empty() ? "" : ",", r);
  row("rng", st.rng.empty() ? "none" : str("ranks ", rng_text));
  std::string metrics = st.metrics_json.size() > 200 ? st.metrics_json.substr(0, 200) + "..." : st.metrics_json;
  row("metrics", metrics.empty() ? "none" : metrics);
  size_t config_lines = std::count(st.config_yaml.begin(), st.config_yaml.end(), '\n');
  row("run config", st.config_yaml.empty() ? "none" : str(config_lines, " lines of resolved YAML"));

  std::vector<std::string> names;
  for (const auto& e : stdfs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string files;
  for (const auto& n : names) files += " " + n;
  row("files", files.empty() ? "" : files.substr(1));

  if (!verify) {
    row("verified", "skipped");
  } else {
    auto reasons = check_checkpoint(ckpt_dir, true);
    if (verified_ok) *verified_ok = reasons.empty();
    if (reasons.empty()) {
      int64_t datasets = 0;
      const json complete = read_complete(dir);
      for (const auto& f : complete["files"]) {
        std::string name = f.get<std::string>();
        if (name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0)
          datasets += Store::open((dir / name).string(), kind_of(name)).dataset_stats().first;
      }
      row("verified", str("ok: all ", datasets, " datasets match their SHA-256 checksums"));
    } else {
      std::string why;
      for (const auto& r : reasons) why += "\n  " + r;
      row("verified", "FAILED:" + why);
    }
  }
  return os.str();
}

}  // namespace dice::ckpt
