// Static anti-hack checks: a small hand-written Python / C++ scanner (see static_check.h).
#include "dice/judge/static_check.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "dice/util/error.h"

namespace dice::judge {

namespace {

constexpr size_t kNpos = std::string::npos;
constexpr size_t kMaxFindingsPerCheck = 8;

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool space_char(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// A string literal of the Python source: its contents (escapes kept) and where they start.
struct Literal {
  std::string text;
  size_t offset = 0;
};

// The Python source with comments and string-literal contents replaced by spaces (same length,
// newlines kept, so offsets and line numbers still match), plus the literals themselves.
struct PyScan {
  std::string code;
  std::vector<Literal> strings;
};

PyScan scan_python(const std::string& src) {
  PyScan s;
  s.code = src;
  const size_t n = src.size();
  size_t i = 0;
  while (i < n) {
    const char c = src[i];
    if (c == '#') {
      while (i < n && src[i] != '\n') s.code[i++] = ' ';
      continue;
    }
    if (c != '\'' && c != '"') {
      ++i;
      continue;
    }
    // string prefix (r, b, f, u and two-letter combinations) directly before the quote
    size_t p = i;
    while (p > 0 && i - p < 2 && std::isalpha(static_cast<unsigned char>(src[p - 1]))) --p;
    bool is_prefix = (p == 0 || !ident_char(src[p - 1])) && i - p <= 2;
    for (size_t k = p; k < i && is_prefix; ++k) is_prefix = std::strchr("rRbBuUfF", src[k]) != nullptr;
    (void)is_prefix;  // raw or not, a backslash never ends a literal: both skip the escaped char
    const bool triple = i + 2 < n && src[i + 1] == c && src[i + 2] == c;
    const size_t q = triple ? 3 : 1;
    const size_t start = i + q;
    size_t j = start, end = kNpos;
    while (j < n) {
      if (src[j] == '\\') {
        j += 2;
        continue;
      }
      if (triple) {
        if (src[j] == c && j + 2 < n && src[j + 1] == c && src[j + 2] == c) {
          end = j;
          break;
        }
      } else if (src[j] == c || src[j] == '\n') {
        end = j;
        break;
      }
      ++j;
    }
    if (end == kNpos || end > n) end = n;
    s.strings.push_back({src.substr(start, end - start), start});
    for (size_t k = start; k < end; ++k)
      if (s.code[k] != '\n') s.code[k] = ' ';
    i = (end < n && src[end] == c) ? end + q : end;
  }
  return s;
}

// C++ text with comments and string / char literal contents blanked (same length).
std::string blank_cpp(const std::string& src) {
  std::string out = src;
  const size_t n = src.size();
  size_t i = 0;
  while (i < n) {
    const char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      while (i < n && src[i] != '\n') out[i++] = ' ';
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      size_t e = src.find("*/", i + 2);
      e = e == kNpos ? n : e + 2;
      for (; i < e; ++i)
        if (out[i] != '\n') out[i] = ' ';
    } else if (c == '"' && i > 0 && src[i - 1] == 'R' && (i < 2 || !ident_char(src[i - 2]))) {
      size_t open = src.find('(', i + 1);
      if (open == kNpos) {
        ++i;
        continue;
      }
      const std::string close = ")" + src.substr(i + 1, open - i - 1) + "\"";
      size_t e = src.find(close, open + 1);
      e = e == kNpos ? n : e;
      for (size_t k = open + 1; k < e; ++k)
        if (out[k] != '\n') out[k] = ' ';
      i = e == n ? n : e + close.size();
    } else if (c == '"' || (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(src[i - 1]))))) {
      size_t j = i + 1;
      while (j < n && src[j] != c && src[j] != '\n') j += src[j] == '\\' ? 2 : 1;
      j = std::min(j, n);
      for (size_t k = i + 1; k < j; ++k) out[k] = ' ';
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// Occurrences of `pat` in `text` that start a token (the char before is not an identifier char);
// with whole_word also the char after.
std::vector<size_t> find_tokens(std::string_view text, std::string_view pat, bool whole_word) {
  std::vector<size_t> out;
  size_t pos = 0;
  while ((pos = text.find(pat, pos)) != kNpos) {
    bool ok = true;
    if (ident_char(pat.front()) && pos > 0) ok = !ident_char(text[pos - 1]);
    if (ok && whole_word && ident_char(pat.back()) && pos + pat.size() < text.size())
      ok = !ident_char(text[pos + pat.size()]);
    if (ok) out.push_back(pos);
    pos += 1;
  }
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---- Python structure: lines, blocks, statements ----

struct Line {
  size_t begin = 0, end = 0;  // [begin, end) in the source, without the '\n'
  int indent = 0;
  bool blank = true;
  bool continuation = false;  // starts inside an open bracket
};

std::vector<Line> split_lines(const std::string& code) {
  std::vector<Line> lines;
  int depth = 0;
  size_t pos = 0;
  while (pos <= code.size()) {
    size_t e = code.find('\n', pos);
    if (e == kNpos) e = code.size();
    Line l;
    l.begin = pos;
    l.end = e;
    l.continuation = depth > 0;
    for (size_t k = pos; k < e; ++k) {
      const char c = code[k];
      if (l.blank && space_char(c)) {
        l.indent += c == '\t' ? 8 - l.indent % 8 : 1;
        continue;
      }
      if (!space_char(c)) l.blank = false;
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    }
    // a backslash continuation keeps the next line inside the statement
    size_t last = e;
    while (last > pos && space_char(code[last - 1])) --last;
    const bool backslash = last > pos && code[last - 1] == '\\';
    lines.push_back(l);
    if (backslash && depth == 0) {
      // mark by bumping depth for exactly one line
      if (e < code.size()) {
        pos = e + 1;
        size_t e2 = code.find('\n', pos);
        if (e2 == kNpos) e2 = code.size();
        Line c2;
        c2.begin = pos;
        c2.end = e2;
        c2.continuation = true;
        c2.blank = false;
        lines.push_back(c2);
        e = e2;
      }
    }
    if (e >= code.size()) break;
    pos = e + 1;
  }
  return lines;
}

// The header line h opens a block; returns the index one past its last line.
size_t block_end(const std::vector<Line>& lines, size_t h) {
  const int d = lines[h].indent;
  size_t k = h + 1;
  // skip the header's own continuation lines
  while (k < lines.size() && lines[k].continuation) ++k;
  size_t last = k;
  for (; k < lines.size(); ++k) {
    if (lines[k].blank || lines[k].continuation) continue;
    if (lines[k].indent <= d) break;
    last = k + 1;
  }
  // include trailing continuation lines of the last statement
  while (last < lines.size() && lines[last].continuation) ++last;
  return std::max(last, h + 1);
}

std::string_view line_text(const std::string& code, const Line& l) {
  return std::string_view(code).substr(l.begin, l.end - l.begin);
}

std::string_view lstrip(std::string_view s) {
  while (!s.empty() && space_char(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view strip(std::string_view s) {
  s = lstrip(s);
  while (!s.empty() && (space_char(s.back()) || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "def NAME(" / "class NAME" on a (stripped) line; returns NAME or "".
std::string header_name(std::string_view t, std::string_view keyword) {
  if (!starts_with(t, keyword)) return "";
  t.remove_prefix(keyword.size());
  if (t.empty() || !space_char(t.front())) return "";
  t = lstrip(t);
  size_t k = 0;
  while (k < t.size() && ident_char(t[k])) ++k;
  return std::string(t.substr(0, k));
}

struct Func {
  size_t first = 0, last = 0;  // line range [first, last)
};

// A statement: its text (continuation lines joined), its first line's index and start offset.
struct Statement {
  std::string text;
  size_t line = 0;
  size_t offset = 0;
  int indent = 0;
};

std::vector<Statement> statements(const std::string& code, const std::vector<Line>& lines, size_t from, size_t to) {
  std::vector<Statement> out;
  for (size_t i = from; i < to && i < lines.size(); ++i) {
    if (lines[i].blank || lines[i].continuation) continue;
    Statement s;
    s.line = i;
    s.offset = lines[i].begin;
    s.indent = lines[i].indent;
    s.text = std::string(line_text(code, lines[i]));
    size_t k = i + 1;
    while (k < lines.size() && k < to && lines[k].continuation) {
      s.text += ' ';
      s.text += std::string(line_text(code, lines[k]));
      ++k;
    }
    // split on ';' at bracket depth 0
    int depth = 0;
    size_t start = 0;
    for (size_t c = 0; c <= s.text.size(); ++c) {
      const char ch = c < s.text.size() ? s.text[c] : ';';
      if (ch == '(' || ch == '[' || ch == '{') ++depth;
      if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) --depth;
      if (ch == ';' && depth == 0) {
        Statement part = s;
        part.text = s.text.substr(start, c - start);
        if (!strip(part.text).empty()) out.push_back(part);
        start = c + 1;
      }
    }
  }
  return out;
}

// Assignment targets of a statement ("a.b = c = d" -> {"a.b", "c"}; "x += 1" -> {"x"}).
std::vector<std::string> assignment_targets(std::string_view st, std::string* rhs = nullptr) {
  std::vector<size_t> eqs;
  int depth = 0;
  for (size_t c = 0; c < st.size(); ++c) {
    const char ch = st[c];
    if (ch == '(' || ch == '[' || ch == '{') ++depth;
    if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) --depth;
    if (ch != '=' || depth != 0) continue;
    const char next = c + 1 < st.size() ? st[c + 1] : ' ';
    const char prev = c > 0 ? st[c - 1] : ' ';
    if (next == '=' || prev == '=' || prev == '!' || prev == '<' || prev == '>' || prev == ':') {
      if (next == '=') ++c;
      continue;
    }
    eqs.push_back(c);
  }
  std::vector<std::string> out;
  if (eqs.empty()) return out;
  size_t start = 0;
  for (size_t e : eqs) {
    std::string_view lhs = st.substr(start, e - start);
    // augmented assignment operator
    while (!lhs.empty() && std::strchr("+-*/%&|^@<>", lhs.back()) && lhs.back() != '\0') lhs.remove_suffix(1);
    // annotated assignment "x: int"
    std::string_view target = strip(lhs);
    int d = 0;
    size_t begin = 0;
    for (size_t c = 0; c <= target.size(); ++c) {
      const char ch = c < target.size() ? target[c] : ',';
      if (ch == '(' || ch == '[' || ch == '{') ++d;
      if ((ch == ')' || ch == ']' || ch == '}') && d > 0) --d;
      if ((ch == ',' || (ch == ':' && d == 0)) && d == 0) {
        std::string_view t = strip(target.substr(begin, c - begin));
        while (!t.empty() && (t.front() == '*' || t.front() == '(' || t.front() == '[')) t.remove_prefix(1);
        while (!t.empty() && (t.back() == ')' || t.back() == ']')) {
          // keep subscripts like a[0]: only drop an unbalanced closing bracket
          const size_t opens = std::count(t.begin(), t.end(), '[') + std::count(t.begin(), t.end(), '(');
          const size_t closes = std::count(t.begin(), t.end(), ']') + std::count(t.begin(), t.end(), ')');
          if (closes <= opens) break;
          t.remove_suffix(1);
        }
        t = strip(t);
        if (!t.empty()) out.emplace_back(t);
        if (ch == ':') break;  // the annotation follows
        begin = c + 1;
      }
    }
    start = e + 1;
  }
  if (rhs) *rhs = std::string(strip(st.substr(eqs.back() + 1)));
  return out;
}

// ---- the checker ----

class Checker {
 public:
  Checker(const std::string& src, const std::string& device, const StaticCheckConfig& cfg)
      : src_(src), device_(device), cfg_(cfg) {
    py_ = scan_python(src);
    lines_ = split_lines(py_.code);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') newline_at_.push_back(i);
    for (const auto& lit : py_.strings) {
      if (!looks_like_cpp(lit.text)) continue;
      cpp_.push_back({blank_cpp(lit.text), lit.offset});
    }
    index_structure();
  }

  std::vector<Finding> run() {
    check_model_new();
    check_no_kernel();
    check_torch_ops();
    check_try_except();
    check_streams();
    check_threads();
    check_monkey_patch();
    check_caching();
    check_precision();
    return std::move(findings_);
  }

 private:
  static bool looks_like_cpp(const std::string& s) {
    return s.find(';') != kNpos || s.find("#include") != kNpos || s.find("__global__") != kNpos;
  }

  size_t line_of(size_t offset) const {
    return static_cast<size_t>(std::lower_bound(newline_at_.begin(), newline_at_.end(), offset) - newline_at_.begin()) + 1;
  }

  bool enabled(const char* check) const { return cfg_.mode(check) != "off"; }

  void add(const char* check, size_t offset, const std::string& what) {
    const std::string& mode = cfg_.mode(check);
    if (mode == "off") return;
    const size_t line = offset == kNpos ? 0 : line_of(offset);
    if (!seen_.insert({check, line}).second) return;
    if (++count_[check] > kMaxFindingsPerCheck) return;
    findings_.push_back({check, mode, line == 0 ? what : str("line ", line, ": ", what)});
  }

  // Python-level token search over the blanked code.
  void py_tokens(const char* check, std::initializer_list<const char*> pats, bool whole, const std::string& why) {
    for (const char* p : pats)
      for (size_t pos : find_tokens(py_.code, p, whole)) add(check, pos, str("'", p, "' ", why));
  }
  // C++-level token search over the blanked C++ literals.
  void cpp_tokens(const char* check, std::initializer_list<const char*> pats, bool whole, const std::string& why) {
    for (const auto& [text, base] : cpp_)
      for (const char* p : pats)
        for (size_t pos : find_tokens(text, p, whole)) add(check, base + pos, str("'", p, "' ", why));
  }

  void index_structure() {
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].blank || lines_[i].continuation) continue;
      std::string_view t = lstrip(line_text(py_.code, lines_[i]));
      if (header_name(t, "class") == "ModelNew" && model_new_line_ == kNpos) {
        model_new_line_ = i;
        model_new_end_ = block_end(lines_, i);
      }
    }
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].blank || lines_[i].continuation) continue;
      std::string_view t = lstrip(line_text(py_.code, lines_[i]));
      if (starts_with(t, "async ")) t = lstrip(t.substr(6));
      const std::string name = header_name(t, "def");
      if (name.empty()) continue;
      Func f{i, block_end(lines_, i)};
      if (lines_[i].indent == 0) module_funcs_[name] = f;
      const bool in_model_new = model_new_line_ != kNpos && i > model_new_line_ && i < model_new_end_;
      if (in_model_new && method_indent_ < 0) method_indent_ = lines_[i].indent;
      if (in_model_new && lines_[i].indent == method_indent_) methods_[name] = f;
    }
    // names bound to load_inline(...) results: calls through them are the candidate's own code
    for (const auto& st : statements(py_.code, lines_, 0, lines_.size())) {
      std::string rhs;
      auto targets = assignment_targets(st.text, &rhs);
      if (rhs.find("load_inline") != kNpos || rhs.find("cpp_extension.load(") != kNpos || starts_with(rhs, "load("))
        for (auto& t : targets) ext_names_.insert(t);
      record_from_import(st.text);
      if (starts_with(lstrip(st.text), "import ") || starts_with(lstrip(st.text), "from ")) {
        // "import torch as T", "import time as t": aliases of roots that must not be patched
        const std::string& s = st.text;
        size_t as = s.find(" as ");
        if (as != kNpos) {
          std::string_view mod = strip(std::string_view(s).substr(0, as));
          std::string_view alias = strip(std::string_view(s).substr(as + 4));
          size_t sp = mod.rfind(' ');
          if (sp != kNpos) mod = mod.substr(sp + 1);
          if (!alias.empty()) aliases_[std::string(alias)] = std::string(mod);
        }
      }
    }
    if (methods_.count("__init__")) {
      const Func& f = methods_["__init__"];
      for (const auto& st : statements(py_.code, lines_, f.first + 1, f.last)) {
        std::string rhs;
        for (const auto& t : assignment_targets(st.text, &rhs)) {
          if (!starts_with(t, "self.")) continue;
          std::string callee = rhs.substr(0, rhs.find('('));
          callee = std::string(strip(callee));
          if (rhs.find('(') == kNpos) continue;
          const bool layer = (starts_with(callee, "nn.") || starts_with(callee, "torch.nn.") || callee == "Model") &&
                             callee.find("Parameter") == kNpos && callee.find("Identity") == kNpos &&
                             callee.find("ModuleList") == kNpos && callee.find("ModuleDict") == kNpos;
          if (layer) layers_[t.substr(5)] = callee;
        }
      }
    }
  }

  // "from torch import matmul", "from torch.nn.functional import relu as r": the bound names are
  // PyTorch ops when called (allocation helpers and namespaces excepted).
  void record_from_import(const std::string& text) {
    std::string_view t = lstrip(text);
    if (!starts_with(t, "from ")) return;
    t.remove_prefix(5);
    t = lstrip(t);
    size_t sp = 0;
    while (sp < t.size() && !space_char(t[sp])) ++sp;
    const std::string mod(t.substr(0, sp));
    if (mod != "torch" && !starts_with(mod, "torch.")) return;
    const bool compute_module = starts_with(mod, "torch.nn.functional") || starts_with(mod, "torch.linalg") ||
                                starts_with(mod, "torch.special") || starts_with(mod, "torch.fft");
    if (mod != "torch" && !compute_module) return;
    size_t imp = t.find(" import ");
    if (imp == kNpos) return;
    std::string names(t.substr(imp + 8));
    for (char& c : names)
      if (c == '(' || c == ')' || c == '\\') c = ' ';
    size_t start = 0;
    while (start <= names.size()) {
      size_t comma = names.find(',', start);
      if (comma == kNpos) comma = names.size();
      std::string_view item = strip(std::string_view(names).substr(start, comma - start));
      start = comma + 1;
      if (item.empty()) continue;
      std::string name(item.substr(0, item.find(' ')));
      std::string bound = name;
      size_t as = item.find(" as ");
      if (as != kNpos) bound = std::string(strip(item.substr(as + 4)));
      static const std::set<std::string> kOk = {
          "nn", "cuda", "backends", "utils", "autograd", "jit", "Tensor", "Size", "device", "dtype", "float32", "float",
          "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
          "tensor", "as_tensor", "arange", "no_grad", "inference_mode", "is_tensor", "numel"};
      if (mod == "torch" && kOk.count(name)) continue;
      from_imports_[bound] = mod + "." + name;
    }
  }

  void check_model_new() {
    if (model_new_line_ == kNpos) {
      add("no_model_new", kNpos, "no 'class ModelNew' in the candidate");
      return;
    }
    // bases: the text between the parentheses of the class header
    const size_t begin = lines_[model_new_line_].begin;
    const size_t colon = py_.code.find(':', begin);
    const size_t open = py_.code.find('(', begin);
    if (open == kNpos || (colon != kNpos && open > colon)) return;
    const size_t close = py_.code.find(')', open);
    if (close == kNpos) return;
    const std::string bases = py_.code.substr(open + 1, close - open - 1);
    for (size_t pos : find_tokens(bases, "Model", true))
      add("inherits_model", open + 1 + pos, "ModelNew subclasses the reference Model");
  }

  void check_no_kernel() {
    if (!enabled("no_kernel")) return;
    const bool builds = !find_tokens(py_.code, "load_inline", true).empty() ||
                        !find_tokens(py_.code, "cpp_extension", true).empty();
    if (device_ == "cuda") {
      bool kernel = false, launch = false;
      for (const auto& [text, base] : cpp_) {
        kernel = kernel || !find_tokens(text, "__global__", true).empty();
        launch = launch || text.find("<<<") != kNpos || text.find("cudaLaunchKernel") != kNpos ||
                 text.find("cudaLaunchCooperativeKernel") != kNpos;
      }
      if (!kernel) add("no_kernel", kNpos, "no __global__ kernel in the candidate's CUDA sources");
      else if (!launch) add("no_kernel", kNpos, "a __global__ kernel is defined but never launched (no <<<...>>>)");
      else if (!builds) add("no_kernel", kNpos, "the CUDA source is never built (no load_inline / cpp_extension)");
    } else {
      bool body = false;
      for (const auto& [text, base] : cpp_)
        body = body || (text.find('{') != kNpos && text.find('(') != kNpos && text.find(';') != kNpos);
      if (!builds) add("no_kernel", kNpos, "no load_inline call: the candidate builds no C++ extension");
      else if (!body) add("no_kernel", kNpos, "no C++ function body in the candidate's sources");
    }
  }

  // Line ranges executed by ModelNew.forward: forward itself plus module functions and ModelNew
  // methods it calls, transitively.
  std::vector<Func> forward_ranges() const {
    std::vector<Func> out;
    auto fwd = methods_.find("forward");
    if (fwd == methods_.end()) return out;
    std::set<std::string> seen = {"m:forward"};
    std::vector<Func> todo = {fwd->second};
    while (!todo.empty()) {
      Func f = todo.back();
      todo.pop_back();
      out.push_back(f);
      const std::string_view body =
          std::string_view(py_.code).substr(lines_[f.first].begin, lines_[f.last - 1].end - lines_[f.first].begin);
      for (const auto& [name, g] : methods_) {
        if (!find_tokens(body, "self." + name + "(", false).empty() && seen.insert("m:" + name).second) todo.push_back(g);
      }
      for (const auto& [name, g] : module_funcs_) {
        if (!find_tokens(body, name + "(", false).empty() && seen.insert("f:" + name).second) todo.push_back(g);
      }
    }
    return out;
  }

  void check_torch_ops() {
    if (!enabled("torch_op_in_forward") || model_new_line_ == kNpos) return;
    static const std::set<std::string> kTorchAllowed = {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
        "tensor", "as_tensor", "from_numpy", "arange", "is_tensor", "is_floating_point", "numel", "no_grad",
        "inference_mode", "enable_grad", "device", "Size", "get_default_dtype", "is_grad_enabled",
        "broadcast_shapes", "promote_types", "finfo", "iinfo", "manual_seed", "set_grad_enabled"};
    static const std::set<std::string> kTorchNamespacesOk = {"cuda", "backends", "utils", "autograd", "jit",
                                                             "profiler", "testing", "version", "distributed"};
    static const std::set<std::string> kTorchNamespacesCompute = {"linalg", "fft", "special", "sparse", "nested"};
    static const std::set<std::string> kComputeMethods = {
        "sum", "mean", "max", "min", "amax", "amin", "prod", "cumsum", "cumprod", "matmul", "mm", "bmm", "mv",
        "addmm", "addmv", "baddbmm", "einsum", "softmax", "log_softmax", "relu", "relu_", "sigmoid", "sigmoid_",
        "tanh", "tanh_", "exp", "exp_", "log", "log_", "sqrt", "rsqrt", "pow", "pow_", "norm", "var", "std", "abs",
        "clamp", "clamp_", "clip", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "masked_fill",
        "masked_fill_", "gelu", "silu", "erf", "sin", "cos", "addcmul", "lerp", "neg", "reciprocal", "square",
        "logsumexp", "dot", "outer", "argmax", "argmin", "topk", "sort", "where", "conv1d", "conv2d", "conv3d",
        "linear", "layer_norm", "group_norm", "batch_norm", "dropout", "maximum", "minimum", "logaddexp",
        "sign", "floor", "ceil", "round", "hardtanh", "leaky_relu", "elu", "selu", "softplus", "mish"};
    for (const Func& f : forward_ranges()) {
      const size_t lo = lines_[f.first].begin, hi = lines_[f.last - 1].end;
      const std::string_view code = py_.code;
      for (size_t i = lo; i < hi; ++i) {
        const char c = code[i];
        if (c == '@') {
          // a decorator starts its line; anything else is the matmul operator
          size_t b = i;
          while (b > lo && space_char(code[b - 1])) --b;
          const bool line_start = b == lo || code[b - 1] == '\n';
          if (!line_start) add("torch_op_in_forward", i, "the '@' (matmul) operator in ModelNew.forward");
          continue;
        }
        if (!ident_char(c) || std::isdigit(static_cast<unsigned char>(c)) || (i > lo && (ident_char(code[i - 1]) || code[i - 1] == '.')))
          continue;
        // an identifier chain a.b.c followed by '('
        std::vector<std::string> parts;
        size_t j = i;
        while (true) {
          size_t k = j;
          while (k < hi && ident_char(code[k])) ++k;
          parts.emplace_back(code.substr(j, k - j));
          if (k < hi && code[k] == '.' && k + 1 < hi && ident_char(code[k + 1])) {
            j = k + 1;
            continue;
          }
          j = k;
          break;
        }
        size_t after = j;
        while (after < hi && space_char(code[after])) ++after;
        const bool call = after < hi && code[after] == '(';
        std::string chain = parts[0];
        for (size_t k = 1; k < parts.size(); ++k) chain += "." + parts[k];
        if (call) {
          const std::string why = judge_call(parts, kTorchAllowed, kTorchNamespacesOk, kTorchNamespacesCompute, kComputeMethods);
          if (!why.empty()) add("torch_op_in_forward", i, str("'", chain, "(' in ModelNew.forward: ", why));
          if (parts.size() == 1 && parts[0] == "super") {
            // super().forward( / super(ModelNew, self).forward(
            size_t close = code.find(')', after);
            if (close != kNpos && close < hi && code.substr(close + 1, 9) == ".forward(")
              add("torch_op_in_forward", i, "super().forward( runs the reference in ModelNew.forward");
          }
        }
        i = j > i ? j - 1 : i;
      }
    }
  }

  std::string judge_call(const std::vector<std::string>& p, const std::set<std::string>& allowed,
                         const std::set<std::string>& ns_ok, const std::set<std::string>& ns_compute,
                         const std::set<std::string>& methods) const {
    std::vector<std::string> parts = p;
    // resolve "import torch.nn.functional as Fn" style aliases of torch modules
    auto al = aliases_.find(parts[0]);
    if (al != aliases_.end() && starts_with(al->second, "torch")) {
      std::vector<std::string> full;
      std::string m = al->second;
      size_t s = 0;
      while (true) {
        size_t d = m.find('.', s);
        full.push_back(m.substr(s, d == kNpos ? kNpos : d - s));
        if (d == kNpos) break;
        s = d + 1;
      }
      full.insert(full.end(), parts.begin() + 1, parts.end());
      parts = full;
    }
    if (ext_names_.count(parts[0]) || (parts.size() >= 2 && ext_names_.count(parts[0] + "." + parts[1]))) return "";
    if (parts.size() == 1) {
      auto it = from_imports_.find(parts[0]);
      if (it != from_imports_.end()) return str("imported from ", it->second);
    }
    if (parts[0] == "torch" && parts.size() >= 2) {
      if (parts[1] == "nn") {
        if (parts.size() >= 3 && parts[2] == "functional") return "a torch.nn.functional op";
        return "";
      }
      if (parts[1] == "ops") return parts.size() >= 3 && (parts[2] == "aten" || parts[2] == "prims") ? "an ATen op" : "";
      if (ns_ok.count(parts[1])) return "";
      if (ns_compute.count(parts[1])) return "a PyTorch compute op";
      if (parts.size() == 2 && allowed.count(parts[1])) return "";
      return "a PyTorch op";
    }
    if (parts[0] == "F" && parts.size() >= 2) return "a torch.nn.functional op";
    if (parts[0] == "nn" && parts.size() >= 3 && parts[1] == "functional") return "a torch.nn.functional op";
    if (parts[0] == "Model" && parts.size() == 2 && parts[1] == "forward") return "runs the reference Model";
    if (parts[0] == "self" && parts.size() == 2) {
      auto it = layers_.find(parts[1]);
      if (it != layers_.end()) return str("calls the PyTorch layer self.", parts[1], " (", it->second, ")");
    }
    if (parts.size() >= 2 && methods.count(parts.back())) return "a PyTorch tensor op";
    return "";
  }

  void check_try_except() {
    if (!enabled("try_except")) return;
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].blank || lines_[i].continuation) continue;
      std::string_view t = lstrip(line_text(py_.code, lines_[i]));
      if (starts_with(t, "try") && (t.size() == 3 || t[3] == ':' || space_char(t[3])))
        add("try_except", lines_[i].begin, "try/except: a fallback path around the candidate's code");
    }
  }

  void check_streams() {
    if (!enabled("stream")) return;
    py_tokens("stream", {"Stream(", "cuda.stream(", "set_stream(", "ExternalStream", "StreamContext"}, false,
              "uses a non-default CUDA stream (work can escape the timing window)");
    cpp_tokens("stream", {"cudaStreamCreate", "getStreamFromPool", "cudaStreamPerThread", "cudaStreamNonBlocking"},
               false, "uses a non-default CUDA stream (work can escape the timing window)");
  }

  void check_threads() {
    if (!enabled("thread")) return;
    py_tokens("thread", {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "ThreadPoolExecutor",
                         "ProcessPoolExecutor"},
              true, "starts threads or processes");
    py_tokens("thread", {"os.fork("}, false, "starts threads or processes");
    cpp_tokens("thread", {"std::thread", "std::jthread", "std::async", "pthread_create"}, true,
               "starts threads (work can escape the timing window)");
  }

  bool patched_root(std::string_view target) const {
    static const char* kRoots[] = {"torch", "time", "builtins", "__builtins__", "Model", "F",
                                   "nn",    "np",   "numpy",    "math",         "sys",   "os"};
    std::string root(target.substr(0, std::min(target.find('.'), target.find('['))));
    auto al = aliases_.find(root);
    if (al != aliases_.end()) root = al->second.substr(0, al->second.find('.'));
    if (root == "globals()" || starts_with(target, "globals()[")) return true;
    if (target.size() == root.size()) return false;  // rebinding a plain name is harmless
    for (const char* r : kRoots)
      if (root == r) return root != "sys" || starts_with(target, "sys.modules");
    return false;
  }

  void check_monkey_patch() {
    if (!enabled("monkey_patch")) return;
    for (const auto& st : statements(py_.code, lines_, 0, lines_.size())) {
      std::string_view t = lstrip(st.text);
      for (const auto& target : assignment_targets(st.text))
        if (patched_root(target)) add("monkey_patch", st.offset, str("assigns to '", target, "'"));
      if (starts_with(t, "del ")) {
        std::string_view target = strip(t.substr(4));
        if (patched_root(target)) add("monkey_patch", st.offset, str("deletes '", target, "'"));
      }
    }
    for (size_t pos : find_tokens(py_.code, "setattr(", false)) {
      size_t comma = py_.code.find(',', pos);
      if (comma == kNpos) continue;
      std::string arg(strip(std::string_view(py_.code).substr(pos + 8, comma - pos - 8)));
      if (patched_root(arg + ".x")) add("monkey_patch", pos, str("setattr on '", arg, "'"));
    }
  }

  void check_caching() {
    if (!enabled("caching")) return;
    py_tokens("caching", {"lru_cache", "functools.cache", "@cache"}, true, "memoizes results across calls");
    for (const auto& st : statements(py_.code, lines_, 0, lines_.size())) {
      if (st.indent != 0) continue;
      std::string rhs;
      auto targets = assignment_targets(st.text, &rhs);
      if (targets.empty() || targets[0] == "__all__") continue;
      std::string r;
      for (char c : rhs)
        if (!space_char(c)) r += c;
      if (r == "{}" || r == "[]" || r == "dict()" || r == "set()" || r == "list()" || starts_with(r, "defaultdict(") ||
          starts_with(r, "collections.") || starts_with(r, "OrderedDict(") || starts_with(r, "weakref."))
        add("caching", st.offset, str("module-level mutable container '", targets[0], "' (a cache across calls)"));
    }
    if (model_new_line_ != kNpos) {
      for (size_t i = model_new_line_; i < model_new_end_; ++i) {
        if (lines_[i].blank) continue;
        std::string_view t = lstrip(line_text(py_.code, lines_[i]));
        if (starts_with(t, "global ") || starts_with(t, "nonlocal "))
          add("caching", lines_[i].begin, "ModelNew rebinds module state (global)");
      }
      auto fwd = methods_.find("forward");
      if (fwd != methods_.end()) {
        for (const auto& st : statements(py_.code, lines_, fwd->second.first + 1, fwd->second.last))
          for (const auto& target : assignment_targets(st.text))
            if (starts_with(target, "self.") && lower(target).find("cache") != kNpos)
              add("caching", st.offset, str("forward stores results in '", target, "'"));
      }
    }
  }

  void check_precision() {
    if (!enabled("precision_downgrade")) return;
    py_tokens("precision_downgrade", {".half(", ".bfloat16(", "torch.float16", "torch.half", "torch.bfloat16",
                                      "allow_tf32", "set_float32_matmul_precision", "autocast"},
              true, "lowers precision below fp32");
    cpp_tokens("precision_downgrade", {"__half", "half2", "__nv_bfloat16", "__float2half", "kHalf", "kBFloat16",
                                       "kFloat16"},
               false, "lowers precision below fp32");
    for (const auto& [text, base] : cpp_) {
      const std::string l = lower(text);
      size_t pos = l.find("tf32");
      if (pos != kNpos) add("precision_downgrade", base + pos, "'tf32' lowers precision below fp32");
    }
  }

  const std::string& src_;
  const std::string& device_;
  const StaticCheckConfig& cfg_;
  PyScan py_;
  std::vector<Line> lines_;
  std::vector<size_t> newline_at_;
  std::vector<std::pair<std::string, size_t>> cpp_;  // blanked C++ literal, its offset in the source
  size_t model_new_line_ = kNpos, model_new_end_ = 0;
  int method_indent_ = -1;
  std::map<std::string, Func> module_funcs_, methods_;
  std::map<std::string, std::string> layers_;   // self.<name> -> nn.<Layer>
  std::map<std::string, std::string> aliases_;  // import X as <alias>
  std::set<std::string> ext_names_;                   // targets of load_inline(...): "ext", "self.ext"
  std::map<std::string, std::string> from_imports_;  // name bound by "from torch... import" -> origin
  std::set<std::pair<std::string, size_t>> seen_;
  std::map<std::string, size_t> count_;
  std::vector<Finding> findings_;
};

}  // namespace

const std::vector<std::string>& static_check_names() {
  static const std::vector<std::string> names = {"no_kernel", "torch_op_in_forward", "try_except", "no_model_new",
                                                 "inherits_model", "stream", "thread", "monkey_patch", "caching",
                                                 "precision_downgrade"};
  return names;
}

const std::string& StaticCheckConfig::mode(const std::string& check) const {
  if (check == "no_kernel") return no_kernel;
  if (check == "torch_op_in_forward") return torch_op_in_forward;
  if (check == "try_except") return try_except;
  if (check == "no_model_new") return no_model_new;
  if (check == "inherits_model") return inherits_model;
  if (check == "stream") return stream;
  if (check == "thread") return thread;
  if (check == "monkey_patch") return monkey_patch;
  if (check == "caching") return caching;
  if (check == "precision_downgrade") return precision_downgrade;
  throw Error(str("unknown static check '", check, "'"));
}

StaticCheckConfig StaticCheckConfig::for_level(int level) const {
  StaticCheckConfig c = *this;
  if (c.torch_op_in_forward == "auto") c.torch_op_in_forward = level <= 1 ? "reject" : "warn";
  return c;
}

std::vector<Finding> static_check(const std::string& code, const std::string& device, const StaticCheckConfig& given) {
  const StaticCheckConfig cfg = given.for_level(0);  // a caller that knows the task's level resolved "auto" already
  DICE_REQUIRE(device == "cuda" || device == "cpu", "static_check: device must be \"cuda\" or \"cpu\", got \"", device, "\"");
  return Checker(code, device, cfg).run();
}

bool has_reject(const std::vector<Finding>& findings) {
  for (const auto& f : findings)
    if (f.severity == "reject") return true;
  return false;
}

}  // namespace dice::judge
