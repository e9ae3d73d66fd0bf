#pragma once
// Typed config tree: YAML file + `--set a.b=c` overrides -> plain structs.
//
// A config struct declares each field once, in a visit() member:
//
//   struct SamplerConfig {
//     int block_size = 4;
//     std::string strategy = "static";
//     template <class V> void visit(V& v) {
//       v("block_size", block_size, "tokens per diffusion block");
//       v.choice("strategy", strategy, {"static", "dynamic", "sequential"}, "unmasking rule");
//     }
//     void validate() const { DICE_REQUIRE(block_size > 0, "sampler.block_size must be > 0"); }  // optional
//   };
//
// load<T>(node) fills a T from YAML: absent keys keep their defaults, unknown keys and values of
// the wrong type are rejected with a sentence naming the full key path. to_yaml() prints the
// resolved tree (every field, defaults included), which runs save next to their outputs.
// A file may start from another: `include: base.yaml` (relative to the file) loads the base, then
// lays the file's keys on top (mappings merge key by key; scalars and lists replace).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "dice/util/error.h"

namespace dice::config {

namespace detail {
template <typename T, typename = void> struct has_visit : std::false_type {};
template <typename T> struct has_visit<T, std::void_t<decltype(&T::template visit<int>)>> : std::true_type {};
template <typename T, typename = void> struct has_validate : std::false_type {};
template <typename T>
struct has_validate<T, std::void_t<decltype(std::declval<const T&>().validate())>> : std::true_type {};
template <typename T> struct is_vector : std::false_type {};
template <typename T> struct is_vector<std::vector<T>> : std::true_type {};

std::string join_path(const std::string& prefix, const std::string& key);
std::string node_text(const YAML::Node& n);
std::string choices_text(const std::vector<std::string>& choices);
std::string str_index(const std::string& path, size_t i);

template <typename T> const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true/false)";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (is_vector<T>::value) return "a list";
  else return "a mapping";
}
}  // namespace detail

template <typename T> void read_value(const YAML::Node& n, const std::string& path, T& out);

// Visitor that reads fields from a YAML mapping and rejects keys no field claimed.
class Reader {
 public:
  Reader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

  template <typename T> void operator()(const char* key, T& field, const char* /*help*/ = "") {
    seen_.insert(key);
    if (!node_.IsMap()) return;
    YAML::Node child = node_[key];
    if (child) read_value(child, detail::join_path(path_, key), field);
  }
  void choice(const char* key, std::string& field, const std::vector<std::string>& choices, const char* help = "") {
    (*this)(key, field, help);
    bool ok = false;
    for (const auto& c : choices) ok = ok || c == field;
    DICE_REQUIRE(ok, "config key '", detail::join_path(path_, key), "' is '", field, "', but must be one of ",
                 detail::choices_text(choices));
  }
  void finish() const;

 private:
  const YAML::Node& node_;
  std::string path_;
  std::set<std::string> seen_;
};

// Visitor that writes every field into a YAML mapping.
class Writer {
 public:
  explicit Writer(YAML::Node& node) : node_(node) {}
  template <typename T> void operator()(const char* key, const T& field, const char* /*help*/ = "");
  void choice(const char* key, const std::string& field, const std::vector<std::string>&, const char* = "") {
    node_[key] = field;
  }

 private:
  YAML::Node& node_;
};

// One-line YAML text of a node (flow style: [1, 2], {a: 1}); "" for an empty string.
std::string dump_flow(const YAML::Node& n);

template <typename T> YAML::Node to_yaml(const T& cfg) {
  YAML::Node n(YAML::NodeType::Map);
  Writer w(n);
  const_cast<T&>(cfg).visit(w);  // visit() only reads through a Writer
  return n;
}

template <typename T> void read_value(const YAML::Node& n, const std::string& path, T& out) {
  if constexpr (detail::has_visit<T>::value) {
    DICE_REQUIRE(n.IsMap() || n.IsNull(), "config key '", path, "' must be a mapping, got '", detail::node_text(n), "'");
    Reader r(n, path);
    out.visit(r);
    r.finish();
  } else if constexpr (detail::is_vector<T>::value) {
    DICE_REQUIRE(n.IsSequence(), "config key '", path, "' must be a list, got '", detail::node_text(n), "'");
    T v;
    for (size_t i = 0; i < n.size(); ++i) {
      typename T::value_type e{};
      read_value(n[i], detail::str_index(path, i), e);
      v.push_back(std::move(e));
    }
    out = std::move(v);
  } else {
    DICE_REQUIRE(n.IsScalar(), "config key '", path, "' must be ", detail::type_name<T>(), ", got '",
                 detail::node_text(n), "'");
    T v{};
    bool ok = YAML::convert<T>::decode(n, v);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // yaml-cpp accepts "1.5" as an int on some versions: require an exact integer literal.
      const std::string& s = n.Scalar();
      ok = ok && s.find_first_of(".eE") == std::string::npos;
    }
    DICE_REQUIRE(ok, "config key '", path, "' must be ", detail::type_name<T>(), ", got '", n.Scalar(), "'");
    out = v;
  }
  if constexpr (detail::has_validate<T>::value) out.validate();
}

template <typename T> void Writer::operator()(const char* key, const T& field, const char*) {
  if constexpr (detail::has_visit<T>::value) {
    node_[key] = to_yaml(field);
  } else if constexpr (detail::is_vector<T>::value) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& e : field) {
      if constexpr (detail::has_visit<typename T::value_type>::value) seq.push_back(to_yaml(e));
      else seq.push_back(e);
    }
    node_[key] = seq;
  } else {
    node_[key] = field;
  }
}

// Applies "a.b.c=value" overrides to a YAML tree (value parsed as YAML, so lists work: x=[1,2]).
void apply_overrides(YAML::Node& root, const std::vector<std::string>& sets);

// Loads a YAML file (empty path: an empty tree), applies overrides. Errors name the file.
YAML::Node load_tree(const std::string& path, const std::vector<std::string>& sets = {});

template <typename T> T load(const YAML::Node& root) {
  T cfg;
  read_value(root, "", cfg);
  return cfg;
}

template <typename T> T load_file(const std::string& path, const std::vector<std::string>& sets = {}) {
  return load<T>(load_tree(path, sets));
}

std::string dump(const YAML::Node& n);

// What a config struct accepts, key by key (`dice config show`, docs/config.md): the dotted key
// ("sampler.temperature"; "stages[].name" for a list of mappings), its type, default and help.
struct KeyDoc {
  std::string key, type, default_text, help;
  std::vector<std::string> choices;
  bool section = false;  // a mapping (its keys follow) or a list of mappings
};

// Visitor that lists every field with its default and help text.
class Describer {
 public:
  Describer(std::vector<KeyDoc>& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}
  template <typename T> void operator()(const char* key, const T& field, const char* help = "");
  void choice(const char* key, const std::string& field, const std::vector<std::string>& choices, const char* help = "") {
    out_.push_back({detail::join_path(prefix_, key), "one of " + detail::choices_text(choices), field, help, choices});
  }

 private:
  std::vector<KeyDoc>& out_;
  std::string prefix_;
};

template <typename T> std::vector<KeyDoc> describe(const T& cfg, const std::string& prefix = "") {
  std::vector<KeyDoc> out;
  Describer d(out, prefix);
  const_cast<T&>(cfg).visit(d);  // visit() only reads through a Describer
  return out;
}

template <typename T> void Describer::operator()(const char* key, const T& field, const char* help) {
  const std::string path = detail::join_path(prefix_, key);
  if constexpr (detail::has_visit<T>::value) {
    out_.push_back({path, "mapping", "", help, {}, true});
    for (auto& k : describe(field, path)) out_.push_back(std::move(k));
  } else if constexpr (detail::is_vector<T>::value) {
    using E = typename T::value_type;
    YAML::Node seq(YAML::NodeType::Sequence);
    if constexpr (detail::has_visit<E>::value) {
      for (const auto& e : field) seq.push_back(to_yaml(e));
      out_.push_back({path, "list of mappings", dump_flow(seq), help, {}, true});
      for (auto& k : describe(E{}, path + "[]")) out_.push_back(std::move(k));
    } else {
      for (const auto& e : field) seq.push_back(e);
      out_.push_back({path, "list", dump_flow(seq), help, {}});
    }
  } else {
    YAML::Node n;
    n = field;
    std::string type = detail::type_name<T>();
    if (type.rfind("a ", 0) == 0) type = type.substr(2);
    else if (type.rfind("an ", 0) == 0) type = type.substr(3);
    out_.push_back({path, type, dump_flow(n), help, {}});
  }
}

// The keys as text (one per line: key, type, default, help) or as a Markdown table.
std::string describe_text(const std::vector<KeyDoc>& keys);
std::string describe_markdown(const std::vector<KeyDoc>& keys);

// Dotted key -> scalar text of a tree ("sampler.temperature" -> "0"); lists of scalars are one
// entry. The basis of run-directory fingerprints (dice/util/run_dir.h).
std::map<std::string, std::string> flatten(const YAML::Node& n);
// A dice::Error naming the file, the key and both lines when a mapping repeats a key (yaml-cpp
// would silently use one of them). load_tree calls it on every file.
void check_unique_keys(const YAML::Node& n, const std::string& file, const std::string& prefix = "");

}  // namespace dice::config
