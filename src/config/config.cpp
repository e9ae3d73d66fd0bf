// YAML loading, overrides and key-path errors for the typed config tree.
#include "dice/config/config.h"

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>

#include "dice/util/fs.h"

namespace dice::config {
namespace detail {
std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}
std::string str_index(const std::string& path, size_t i) { return str(path, "[", i, "]"); }
std::string node_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}
std::string choices_text(const std::vector<std::string>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + ("'" + choices[i] + "'");
  return s;
}
}  // namespace detail

void Reader::finish() const {
  if (!node_.IsMap()) return;
  for (const auto& kv : node_) {
    std::string key = kv.first.as<std::string>();
    if (!seen_.count(key)) {
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      throw Error(str("unknown config key '", detail::join_path(path_, key), "' (known keys",
                      path_.empty() ? "" : " under '" + path_ + "'", ": ", known, ")"));
    }
  }
}

void apply_overrides(YAML::Node& root, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    auto eq = s.find('=');
    DICE_REQUIRE(eq != std::string::npos && eq > 0, "override '", s, "' must look like key.path=value");
    std::string path = s.substr(0, eq), value = s.substr(eq + 1);
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      throw Error(str("override '", s, "': cannot parse the value as YAML: ", e.msg));
    }
    // Walk/create the mapping chain. YAML::Node is a handle, so assignment through
    // operator[] on a copy writes into the tree.
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
      auto dot = path.find('.', start);
      parts.push_back(path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      DICE_REQUIRE(!parts[i].empty(), "override '", s, "' has an empty key");
      YAML::Node next = chain.back()[parts[i]];
      if (!next || next.IsNull()) {
        chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next = chain.back()[parts[i]];
      }
      DICE_REQUIRE(next.IsMap(), "override '", s, "': '", parts[i], "' is not a mapping");
      chain.push_back(next);
    }
    chain.back()[parts.back()] = parsed.IsNull() && value.empty() ? YAML::Node(std::string()) : parsed;
  }
}

void check_unique_keys(const YAML::Node& n, const std::string& file, const std::string& prefix) {
  if (n.IsMap()) {
    std::map<std::string, int> line_of;
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      const std::string full = detail::join_path(prefix, key);
      auto [it, fresh] = line_of.emplace(key, kv.first.Mark().line + 1);
      DICE_REQUIRE(fresh, "config file '", file, "': key '", full, "' appears twice (lines ", it->second, " and ",
                   kv.first.Mark().line + 1, "); YAML keeps only one of them, so merge the two blocks.");
      check_unique_keys(kv.second, file, full);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_unique_keys(n[i], file, detail::str_index(prefix, i));
  }
}

namespace {
void flatten_into(const YAML::Node& n, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten_into(kv.second, detail::join_path(prefix, kv.first.Scalar()), out);
  } else if (n.IsSequence()) {
    bool scalars = true;
    for (const auto& e : n) scalars = scalars && !e.IsMap();
    if (scalars) {
      out[prefix] = detail::node_text(n);
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) flatten_into(n[i], detail::str_index(prefix, i), out);
    out[prefix + ".size"] = std::to_string(n.size());
  } else {
    out[prefix] = n.IsNull() ? "" : n.Scalar();
  }
}
}  // namespace

std::map<std::string, std::string> flatten(const YAML::Node& n) {
  std::map<std::string, std::string> out;
  flatten_into(n, "", out);
  return out;
}

namespace {

// `over` laid onto `base`: mappings merge key by key, anything else (scalars, lists) replaces.
YAML::Node merged(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (auto it = over.begin(); it != over.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    out[k] = out[k] ? merged(out[k], it->second) : YAML::Clone(it->second);
  }
  return out;
}

YAML::Node load_file_tree(const std::string& path, std::vector<std::string>& chain) {
  DICE_REQUIRE(fs::exists(path), "config file '", path, "' does not exist",
               chain.empty() ? std::string() : str(" (included by '", chain.back(), "')"));
  const std::string canon = std::filesystem::weakly_canonical(path).string();
  DICE_REQUIRE(std::find(chain.begin(), chain.end(), canon) == chain.end(), "config file '", path,
               "' includes itself (through ", chain.back(), ")");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw Error(str("config file '", path, "' is not valid YAML (line ", e.mark.line + 1, "): ", e.msg));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  DICE_REQUIRE(root.IsMap(), "config file '", path, "' must hold a mapping at the top level");
  check_unique_keys(root, path, "");
  if (!root["include"]) return root;
  // `include: base.yaml` (relative to this file): the base's keys, then this file's on top
  DICE_REQUIRE(root["include"].IsScalar() && !root["include"].Scalar().empty(), "config file '", path,
               "': include must name one file (a path relative to this file)");
  std::filesystem::path base = root["include"].Scalar();
  if (base.is_relative()) base = std::filesystem::path(path).parent_path() / base;
  chain.push_back(canon);
  YAML::Node under = load_file_tree(base.string(), chain);
  chain.pop_back();
  root.remove("include");
  return merged(under, root);
}

}  // namespace

YAML::Node load_tree(const std::string& path, const std::vector<std::string>& sets) {
  YAML::Node root(YAML::NodeType::Map);
  if (!path.empty()) {
    std::vector<std::string> chain;
    root = load_file_tree(path, chain);
  }
  apply_overrides(root, sets);
  return root;
}

std::string dump(const YAML::Node& n) {
  YAML::Emitter e;
  e << n;
  return std::string(e.c_str()) + "\n";
}

std::string dump_flow(const YAML::Node& n) {
  if (n.IsScalar() && n.Scalar().empty()) return "";
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

std::string describe_text(const std::vector<KeyDoc>& keys) {
  size_t w = 0;
  for (const auto& k : keys) w = std::max(w, k.key.size());
  std::string out;
  for (const auto& k : keys) {
    std::string line = k.key + std::string(w + 2 - k.key.size(), ' ');
    if (k.section) {
      line += "(" + k.type + ")";
    } else {
      line += k.default_text.empty() ? std::string("\"\"") : k.default_text;
      line += "  [" + k.type + "]";
    }
    if (!k.help.empty()) line += "  " + k.help;
    out += line + "\n";
  }
  return out;
}

std::string describe_markdown(const std::vector<KeyDoc>& keys) {
  auto cell = [](std::string s) {
    std::string o;
    for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
    return o;
  };
  std::string out = "| key | type | default | what it does |\n|---|---|---|---|\n";
  for (const auto& k : keys)
    out += "| `" + k.key + "` | " + cell(k.type) + " | " +
           (k.section ? std::string() : "`" + cell(k.default_text.empty() ? "\"\"" : k.default_text) + "`") + " | " +
           cell(k.help) + " |\n";
  return out;
}

}  // namespace dice::config
