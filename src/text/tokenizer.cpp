// Byte-level BPE: loading tokenizer.json, added tokens, the BPE merge loop and the word cache.
#include "dice/text/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "dice/text/pretokenize.h"
#include "dice/text/unicode.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::text {
namespace {

using nlohmann::json;

// The Split pattern of Qwen2 / Qwen2.5 / Qwen3 tokenizers, implemented by pretokenize().
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte <-> printable character map: byte b is written as code point kByteChar[b].
struct ByteLevelMap {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[512];
  ByteLevelMap() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelMap& byte_level() {
  static const ByteLevelMap m;
  return m;
}

// Byte-level vocabulary form -> raw bytes; nullopt when a character is outside the map.
std::optional<std::string> token_to_bytes(std::string_view tok) {
  std::string out;
  out.reserve(tok.size());
  for (size_t i = 0; i < tok.size();) {
    auto d = unicode::decode_utf8(tok.data() + i, tok.size() - i);
    if (d.cp >= 512 || byte_level().cp_to_byte[d.cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_level().cp_to_byte[d.cp]));
    i += d.len;
  }
  return out;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) unicode::append_utf8(out, byte_level().byte_to_cp[b]);
  return out;
}

inline uint64_t mix(uint64_t k) { return k * 0x9E3779B97F4A7C15ull; }

inline uint64_t hash_bytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  std::memcpy(&w, s + i, n - i);
  h ^= w;
  h ^= h >> 33;  // murmur3's finalizer: every input bit reaches the low bits used as an index
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

// Open-addressing map (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
  }
  // A pair listed twice keeps its last rank, as Hugging Face's merge map does. Returns false then.
  bool insert(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, rank, merged};
        return true;
      }
      if (slots_[i].key == key) {
        slots_[i] = {key, rank, merged};
        return false;
      }
    }
  }
  const Entry* find(int32_t a, int32_t b) const {
    uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return static_cast<size_t>(mix(key) >> shift_); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
};

// Open-addressing index bytes -> vocab id over the tokenizer's own id -> bytes table.
class BytesIndex {
 public:
  void build(const std::vector<std::string>& id_bytes, const std::vector<uint8_t>& id_kind) {
    size_t n = 0;
    for (uint8_t k : id_kind) n += k == 1;
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t id = 0; id < id_kind.size(); ++id) {
      if (id_kind[id] != 1) continue;
      const std::string& b = id_bytes[id];
      size_t i = hash_bytes(b.data(), b.size()) & mask_;
      while (slots_[i] >= 0) i = (i + 1) & mask_;
      slots_[i] = static_cast<int32_t>(id);
    }
  }
  int32_t find(std::string_view b, const std::vector<std::string>& id_bytes) const {
    if (slots_.empty()) return -1;
    for (size_t i = hash_bytes(b.data(), b.size()) & mask_;; i = (i + 1) & mask_) {
      int32_t id = slots_[i];
      if (id < 0) return -1;
      if (id_bytes[static_cast<size_t>(id)] == b) return id;
    }
  }

 private:
  std::vector<int32_t> slots_;
  size_t mask_ = 0;
};

// Per-thread cache of BPE results for short pieces (code and prose repeat words a lot).
struct WordCache {
  static constexpr size_t kSlots = size_t{1} << 16;
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kMaxArenaBytes = size_t{16} << 20;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, ids_len = 0;  // key_len 0: empty slot
  };
  uint64_t owner = 0;
  size_t used = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<int32_t> ids;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    used = 0;
    slots.assign(kSlots, Slot{});
    keys.clear();
    ids.clear();
  }
  // Appends the cached ids for the piece to `out` and returns true, or returns false.
  bool lookup(const char* s, size_t n, uint64_t h, std::vector<int32_t>& out) const {
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& e = slots[i];
      if (e.key_len == 0) return false;
      if (e.hash == h && e.key_len == n && std::memcmp(keys.data() + e.key_off, s, n) == 0) {
        out.insert(out.end(), ids.begin() + e.ids_off, ids.begin() + e.ids_off + e.ids_len);
        return true;
      }
    }
  }
  void store(const char* s, size_t n, uint64_t h, const int32_t* v, size_t m) {
    if (used >= kSlots / 2 || keys.size() > kMaxArenaBytes) reset(owner);
    size_t i = h & (kSlots - 1);
    while (slots[i].key_len != 0) i = (i + 1) & (kSlots - 1);
    slots[i] = {h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(ids.size()),
                static_cast<uint16_t>(n), static_cast<uint16_t>(m)};
    keys.append(s, n);
    ids.insert(ids.end(), v, v + m);
    ++used;
  }
};

std::atomic<uint64_t> g_next_serial{1};

bool is_space_at(std::string_view s, size_t i, size_t* len) {
  auto d = unicode::decode_utf8(s.data() + i, s.size() - i);
  *len = d.len;
  return unicode::char_class(d.cp) == unicode::kSpace;
}

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  uint64_t serial = g_next_serial.fetch_add(1);
  bool nfc = false;
  bool ignore_merges = false;
  bool word_cache = true;

  std::vector<std::string> id_bytes;  // raw bytes of every id (vocab or added)
  std::vector<uint8_t> id_kind;       // 0 unused, 1 vocab, 2 added
  BytesIndex vocab_index;              // bytes -> vocab id
  int32_t byte_id[256];
  MergeTable merges;

  std::vector<AddedToken> added;            // sorted by id
  std::vector<int32_t> added_by_first[256];  // indices into `added`, longest content first
  bool has_added_first[256] = {};

  // ---- encoding ----

  // Pieces longer than this use the heap-based merge loop (the simple loop is quadratic).
  static constexpr size_t kHeapMinBytes = 192;

  void bpe(const char* s, size_t n, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      int32_t id = vocab_index.find(std::string_view(s, n), id_bytes);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    thread_local std::vector<int32_t> sym;
    thread_local std::vector<uint64_t> pair;  // per adjacent pair: rank << 32 | merged id, or kNone
    sym.resize(n);
    for (size_t i = 0; i < n; ++i) sym[i] = byte_id[static_cast<unsigned char>(s[i])];
    if (n > kHeapMinBytes) return bpe_heap(sym, out);
    constexpr uint64_t kNone = ~uint64_t{0};
    auto pair_at = [&](size_t i) {
      const MergeTable::Entry* e = merges.find(sym[i], sym[i + 1]);
      return e ? (uint64_t{e->rank} << 32) | static_cast<uint32_t>(e->merged) : kNone;
    };
    pair.resize(n);
    for (size_t i = 0; i + 1 < n; ++i) pair[i] = pair_at(i);
    size_t len = n;
    while (len > 1) {
      // Lowest rank wins; among equal pairs (same rank) the leftmost, as strict < keeps it.
      size_t best = 0;
      for (size_t i = 1; i + 1 < len; ++i)
        if (pair[i] < pair[best]) best = i;
      if (pair[best] == kNone) break;
      sym[best] = static_cast<int32_t>(static_cast<uint32_t>(pair[best]));
      for (size_t i = best + 1; i + 1 < len; ++i) {
        sym[i] = sym[i + 1];
        pair[i] = pair[i + 1];
      }
      --len;
      if (best + 1 < len) pair[best] = pair_at(best);
      if (best > 0) pair[best - 1] = pair_at(best - 1);
    }
    out.insert(out.end(), sym.begin(), sym.begin() + static_cast<long>(len));
  }

  // Long pieces (e.g. runs of spaces): a heap of candidate merges ordered by (rank, position).
  void bpe_heap(std::vector<int32_t>& sym, std::vector<int32_t>& out) const {
    const size_t n = sym.size();
    thread_local std::vector<int32_t> prev, next;
    prev.resize(n);
    next.resize(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    struct Cand {
      uint32_t rank;
      int32_t pos;
      int32_t left, right;  // ids when pushed: stale candidates no longer match
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Cand> heap;  // min-heap on (rank, position)
    heap.clear();
    auto push = [&](int32_t i) {
      if (i < 0 || next[i] < 0) return;
      if (auto* e = merges.find(sym[i], sym[next[i]])) {
        heap.push_back({e->rank, i, sym[i], sym[next[i]]});
        std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
      }
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
    thread_local std::vector<uint8_t> dead;
    dead.assign(n, 0);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
      Cand c = heap.back();
      heap.pop_back();
      int32_t r = next[c.pos];
      if (dead[c.pos] || r < 0 || sym[c.pos] != c.left || sym[r] != c.right) continue;
      sym[c.pos] = merges.find(c.left, c.right)->merged;
      dead[r] = 1;
      next[c.pos] = next[r];
      if (next[r] >= 0) prev[next[r]] = c.pos;
      push(prev[c.pos]);
      push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
  }

  void encode_piece(const char* s, size_t n, std::vector<int32_t>& out) const {
    if (n == 1) {
      out.push_back(byte_id[static_cast<unsigned char>(s[0])]);
      return;
    }
    if (n > WordCache::kMaxKeyBytes || !word_cache) return bpe(s, n, out);
    thread_local WordCache cache;
    if (cache.owner != serial) cache.reset(serial);
    uint64_t h = hash_bytes(s, n);
    if (cache.lookup(s, n, h, out)) return;
    size_t before = out.size();
    bpe(s, n, out);
    cache.store(s, n, h, out.data() + before, out.size() - before);
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc) {
      normalized = unicode::nfc(text);
      text = normalized;
    }
    thread_local std::vector<Piece> pieces;
    pieces.clear();
    pretokenize(text, pieces);
    for (const Piece& p : pieces) encode_piece(text.data() + p.offset, p.length, out);
  }

  // The added token matching at text[i] (longest first), or nullptr.
  const AddedToken* match_added(std::string_view text, size_t i, bool allow_special) const {
    for (int32_t k : added_by_first[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = added[static_cast<size_t>(k)];
      if (t.special && !allow_special) continue;
      if (text.compare(i, t.content.size(), t.content) == 0) return &t;
    }
    return nullptr;
  }

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    size_t seg = 0;  // start of the current ordinary-text stretch
    for (size_t i = 0; i < text.size();) {
      if (!has_added_first[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      const AddedToken* t = match_added(text, i, allow_special);
      if (!t) {
        ++i;
        continue;
      }
      size_t seg_end = i;
      if (t->lstrip) {
        while (seg_end > seg) {  // back over whitespace characters
          size_t k = seg_end - 1;
          while (k > seg && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
          size_t len;
          if (!is_space_at(text, k, &len) || k + len != seg_end) break;
          seg_end = k;
        }
      }
      encode_text(text.substr(seg, seg_end - seg), out);
      out.push_back(t->id);
      i += t->content.size();
      if (t->rstrip) {
        size_t len;
        while (i < text.size() && is_space_at(text, i, &len)) i += len;
      }
      seg = i;
    }
    encode_text(text.substr(seg), out);
    return out;
  }

  // ---- loading ----

  void add_token(AddedToken t, const std::string& where) {
    DICE_REQUIRE(t.id >= 0, "Added token '", t.content, "' in ", where, " has a negative id.");
    DICE_REQUIRE(!t.content.empty(), "An added token with id ", t.id, " in ", where, " is empty.");
    for (auto& a : added) {
      if (a.content == t.content) {
        DICE_REQUIRE(a.id == t.id, "Added token '", t.content, "' has id ", a.id, " in one file and ", t.id,
                     " in ", where, "; the tokenizer files disagree.");
        a.special = a.special || t.special;
        return;
      }
    }
    auto uid = static_cast<size_t>(t.id);
    if (uid < id_kind.size() && id_kind[uid] == 2) {
      DICE_REQUIRE(false, "Id ", t.id, " is used by two added tokens ('", id_bytes[uid], "' and '", t.content,
                   "', the latter in ", where, ").");
    }
    if (uid >= id_kind.size()) {
      id_kind.resize(uid + 1, 0);
      id_bytes.resize(uid + 1);
    }
    id_kind[uid] = 2;  // an added token takes precedence over a vocab entry with the same id
    id_bytes[uid] = t.content;
    added.push_back(std::move(t));
  }

  void index_added() {
    std::sort(added.begin(), added.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (auto& v : added_by_first) v.clear();
    std::fill(std::begin(has_added_first), std::end(has_added_first), false);
    for (size_t k = 0; k < added.size(); ++k) {
      auto f = static_cast<unsigned char>(added[k].content[0]);
      added_by_first[f].push_back(static_cast<int32_t>(k));
      has_added_first[f] = true;
    }
    for (auto& v : added_by_first)
      std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
        return added[static_cast<size_t>(a)].content.size() > added[static_cast<size_t>(b)].content.size();
      });
  }

  int32_t find_added(std::string_view content) const {
    for (auto& a : added)
      if (a.content == content) return a.id;
    return -1;
  }
};

namespace {

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

void check_pre_tokenizer(const json& pt, const std::string& origin) {
  auto unsupported = [&](const std::string& why) {
    return dice::str("The pre_tokenizer of ", origin, " is not supported (", why,
                     "); dice implements the Qwen2/Qwen3 byte-level pre-tokenizer only.");
  };
  DICE_REQUIRE(pt.is_object(), unsupported("missing or not an object"));
  const std::string t = type_of(pt);
  DICE_REQUIRE(t == "Sequence", unsupported("type '" + t + "' instead of Sequence[Split, ByteLevel]"));
  const json& seq = pt.value("pretokenizers", json::array());
  DICE_REQUIRE(seq.is_array() && seq.size() == 2, unsupported("expected two steps, Split and ByteLevel"));
  const json& split = seq[0];
  const json& bl = seq[1];
  DICE_REQUIRE(type_of(split) == "Split", unsupported("first step is not Split"));
  std::string pattern = split.contains("pattern") && split["pattern"].is_object()
                            ? split["pattern"].value("Regex", std::string())
                            : std::string();
  DICE_REQUIRE(pattern == kQwen2Pattern, unsupported("the Split regex differs from Qwen2's"));
  DICE_REQUIRE(split.value("behavior", std::string()) == "Isolated" && !split.value("invert", false),
               unsupported("Split behavior must be Isolated, not inverted"));
  DICE_REQUIRE(type_of(bl) == "ByteLevel", unsupported("second step is not ByteLevel"));
  DICE_REQUIRE(!bl.value("add_prefix_space", false) && !bl.value("use_regex", true),
               unsupported("ByteLevel must have add_prefix_space and use_regex off"));
}

AddedToken added_from_json(const json& j, int32_t id) {
  AddedToken t;
  t.id = id;
  t.content = j.value("content", std::string());
  t.special = j.value("special", false);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  DICE_REQUIRE(!j.value("single_word", false), "Added token '", t.content,
               "' sets single_word, which dice's tokenizer does not support.");
  return t;
}

// tokenizer.json is 11 MB, almost all of it model.vocab and model.merges: those two are streamed
// into flat vectors by a SAX handler; the small rest becomes a DOM.
struct ParsedTokenizerJson {
  json rest;
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
};

class TokenizerJsonSax : public nlohmann::json_sax<json> {
 public:
  TokenizerJsonSax(ParsedTokenizerJson& out, const std::string& origin) : out_(out), origin_(origin) {}
  std::string error;

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return mode_ == kVocab ? vocab_entry(v) : value(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return mode_ == kVocab ? vocab_entry(v > (uint64_t{1} << 40) ? -1 : static_cast<int64_t>(v)) : value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t&) override { return fail("binary data"); }
  bool string(string_t& v) override {
    if (mode_ == kMerges) {
      auto sp = v.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= v.size() || v.find(' ', sp + 1) != std::string::npos)
        return fail(dice::str("merge #", out_.merges.size(), " ('", v, "') is not two tokens separated by a space"));
      out_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    if (mode_ == kMergePair) {
      if (pair_n_ >= 2) return fail(dice::str("merge #", out_.merges.size(), " has more than two tokens"));
      (pair_n_++ == 0 ? pair_.first : pair_.second) = std::move(v);
      return true;
    }
    return value(std::move(v));
  }
  bool start_object(std::size_t) override {
    if (mode_ != kDom) return fail("unexpected object inside model.vocab or model.merges");
    if (at_model_key("vocab")) {
      mode_ = kVocab;
      out_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == kVocab) {
      mode_ = kDom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == kMerges) {
      mode_ = kMergePair;
      pair_n_ = 0;
      return true;
    }
    if (mode_ != kDom) return fail("unexpected array inside model.vocab or a merge");
    if (at_model_key("merges")) {
      mode_ = kMerges;
      out_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == kMergePair) {
      if (pair_n_ != 2) return fail(dice::str("merge #", out_.merges.size(), " is not a pair of tokens"));
      out_.merges.push_back(std::move(pair_));
      mode_ = kMerges;
      return true;
    }
    if (mode_ == kMerges) {
      mode_ = kDom;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    error = dice::str("Could not parse ", origin_, " as JSON (byte ", pos, "): ", e.what());
    return false;
  }

 private:
  enum Mode { kDom, kVocab, kMerges, kMergePair };

  bool fail(const std::string& what) {
    error = dice::str(origin_, ": ", what, ".");
    return false;
  }
  bool at_model_key(const char* k) const {
    return stack_.size() == 2 && path_.size() == 2 && path_[1] == "model" && key_ == k && stack_.back()->is_object();
  }
  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(key_), id);
    return true;
  }
  json* insert(json v) {
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return &out_.rest;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json v) {
    if (mode_ != kDom) return fail(mode_ == kVocab ? "a model.vocab id is not an integer" : "a merge is not a string");
    insert(std::move(v));
    return true;
  }
  bool open(json v) {
    std::string k = (!stack_.empty() && stack_.back()->is_object()) ? key_ : std::string();
    stack_.push_back(insert(std::move(v)));
    path_.push_back(std::move(k));
    return true;
  }
  bool close() {
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  ParsedTokenizerJson& out_;
  const std::string& origin_;
  Mode mode_ = kDom;
  std::vector<json*> stack_;       // open containers of the DOM
  std::vector<std::string> path_;  // the key each open container was stored under
  std::string key_;
  std::pair<std::string, std::string> pair_;
  int pair_n_ = 0;
};

ParsedTokenizerJson parse_tokenizer_json(std::string_view text, const std::string& origin) {
  ParsedTokenizerJson out;
  TokenizerJsonSax sax(out, origin);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    throw Error(dice::str("Could not parse ", origin, " as JSON: ", e.what()));
  }
  DICE_REQUIRE(ok, sax.error.empty() ? dice::str("Could not parse ", origin, " as JSON.") : sax.error);
  return out;
}

json parse_json(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(dice::str("Could not parse ", origin, " as JSON: ", e.what()));
  }
}

std::unique_ptr<Tokenizer::Impl> load(ParsedTokenizerJson& parsed, const std::string& origin) {
  const json& j = parsed.rest;
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->origin = origin;
  DICE_REQUIRE(j.is_object() && j.contains("model") && j["model"].is_object(), origin,
               " is not a Hugging Face tokenizer.json (no \"model\" object).");
  const json& model = j["model"];
  DICE_REQUIRE(type_of(model) == "BPE" || (!model.contains("type") && parsed.has_merges), origin,
               " holds a '", type_of(model), "' model; dice supports byte-level BPE only.");
  DICE_REQUIRE(!model.contains("dropout") || model["dropout"].is_null(), origin, " sets BPE dropout, which dice does not support.");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    DICE_REQUIRE(!model.contains(k) || model[k].is_null() || model[k] == "", origin, " sets model.", k,
                 ", which byte-level BPE does not use; dice does not support it.");
  impl->ignore_merges = model.value("ignore_merges", false);

  const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
  if (!norm.is_null()) {
    DICE_REQUIRE(type_of(norm) == "NFC", "The normalizer '", type_of(norm), "' of ", origin,
                 " is not supported; dice supports NFC or none.");
    impl->nfc = true;
  }
  check_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), origin);
  if (j.contains("decoder") && !j["decoder"].is_null())
    DICE_REQUIRE(type_of(j["decoder"]) == "ByteLevel", "The decoder '", type_of(j["decoder"]), "' of ", origin,
                 " is not supported; dice supports ByteLevel.");

  // Vocabulary.
  DICE_REQUIRE(parsed.has_vocab && !parsed.vocab.empty(), origin, " has no model.vocab object.");
  for (auto& [token, id64] : parsed.vocab) {
    DICE_REQUIRE(id64 >= 0 && id64 < (int64_t{1} << 30), "Vocabulary entry '", token, "' in ", origin,
                 " has no valid id.");
    auto id = static_cast<int32_t>(id64);
    auto bytes = token_to_bytes(token);
    DICE_REQUIRE(bytes.has_value(), "Vocabulary entry '", token, "' in ", origin,
                 " is not in byte-level form; dice supports byte-level BPE only.");
    auto uid = static_cast<size_t>(id);
    if (uid >= impl->id_kind.size()) {
      impl->id_kind.resize(uid + 1, 0);
      impl->id_bytes.resize(uid + 1);
    }
    DICE_REQUIRE(impl->id_kind[uid] == 0, "Id ", id, " appears twice in the vocabulary of ", origin, ".");
    impl->id_kind[uid] = 1;
    impl->id_bytes[uid] = std::move(*bytes);
  }
  impl->vocab_index.build(impl->id_bytes, impl->id_kind);
  auto vocab_id = [&](std::string_view bytes) { return impl->vocab_index.find(bytes, impl->id_bytes); };
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    impl->byte_id[b] = vocab_id(std::string_view(&c, 1));
    DICE_REQUIRE(impl->byte_id[b] >= 0, "The vocabulary of ", origin, " lacks the token for byte ", b,
                 "; it is not a byte-level BPE vocabulary.");
  }

  // Merges, in rank order: "a b" strings or ["a", "b"] pairs.
  impl->merges.reserve(parsed.merges.size());
  uint32_t rank = 0;
  for (auto& [a, b] : parsed.merges) {
    auto ba = token_to_bytes(a), bb = token_to_bytes(b);
    int32_t ia = ba ? vocab_id(*ba) : -1, ib = bb ? vocab_id(*bb) : -1;
    int32_t im = (ia >= 0 && ib >= 0) ? vocab_id(*ba + *bb) : -1;
    DICE_REQUIRE(ia >= 0 && ib >= 0 && im >= 0, "Merge #", rank, " of ", origin, " ('", a, "' + '", b,
                 "') uses a token missing from the vocabulary.");
    impl->merges.insert(ia, ib, rank, im);
    ++rank;
  }

  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      DICE_REQUIRE(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                       a["content"].is_string(),
                   "An entry of added_tokens in ", origin, " lacks an integer id or a string content.");
      impl->add_token(added_from_json(a, a["id"].get<int32_t>()), origin);
    }
  }
  impl->index_added();
  parsed = ParsedTokenizerJson();
  return impl;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& origin) {
  ParsedTokenizerJson parsed = parse_tokenizer_json(json_text, origin);
  return Tokenizer(load(parsed, origin));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  DICE_REQUIRE(fs::exists(path), "Tokenizer file ", path, " does not exist.");
  return from_json_text(fs::read_file(path), path);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  DICE_REQUIRE(fs::exists(tj), "The model folder ", dir,
               " has no tokenizer.json; point at a Hugging Face model folder (e.g. SDAR-4B-Chat).");
  Tokenizer tok = from_file(tj);
  Impl& impl = *tok.impl_;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    json cfg = parse_json(fs::read_file(cfg_path), cfg_path);
    if (cfg.is_object() && cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
      for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
        int32_t id = -1;
        try {
          id = std::stoi(it.key());
        } catch (const std::exception&) {
        }
        DICE_REQUIRE(id >= 0 && it.value().is_object() && it.value().contains("content"), "Entry '", it.key(),
                     "' of added_tokens_decoder in ", cfg_path, " is not an id with a content.");
        impl.add_token(added_from_json(it.value(), id), cfg_path);
      }
    }
  }
  const std::string at_path = dir + "/added_tokens.json";
  if (fs::exists(at_path)) {
    json at = parse_json(fs::read_file(at_path), at_path);
    DICE_REQUIRE(at.is_object(), at_path, " is not a JSON object of token -> id.");
    for (auto it = at.begin(); it != at.end(); ++it) {
      DICE_REQUIRE(it.value().is_number_integer(), "Token '", it.key(), "' in ", at_path, " has no integer id.");
      AddedToken t;
      t.id = it.value().get<int32_t>();
      t.content = it.key();
      t.special = t.content == "<|MASK|>" || t.content == "<MASK>";
      impl.add_token(std::move(t), at_path);
    }
  }
  impl.index_added();
  impl.origin = dir;
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  return impl_->encode(text, allow_special);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  DICE_REQUIRE(id >= 0 && static_cast<size_t>(id) < impl_->id_kind.size() && impl_->id_kind[static_cast<size_t>(id)],
               "Token id ", id, " is not in the tokenizer (", impl_->origin, ").");
  return impl_->id_bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  out.reserve(ids.size() * 4);
  const Impl& im = *impl_;
  for (int32_t id : ids) {
    auto u = static_cast<size_t>(id);
    DICE_REQUIRE(id >= 0 && u < im.id_kind.size() && im.id_kind[u], "Cannot decode token id ", id,
                 ": it is not in the tokenizer (", im.origin, ", vocab size ", vocab_size(), ").");
    if (skip_special && im.id_kind[u] == 2 && is_special(id)) continue;
    out += im.id_bytes[u];
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  int32_t a = impl_->find_added(token);
  if (a >= 0) return a;
  auto bytes = token_to_bytes(token);
  if (!bytes) return std::nullopt;
  int32_t id = impl_->vocab_index.find(*bytes, impl_->id_bytes);
  if (id < 0) return std::nullopt;
  return id;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  std::string bytes = token_bytes(id);
  return impl_->id_kind[static_cast<size_t>(id)] == 2 ? bytes : bytes_to_token(bytes);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_kind.size()); }

bool Tokenizer::is_special(int32_t id) const {
  for (auto& a : impl_->added)
    if (a.id == id) return a.special;
  return false;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

namespace {
int32_t require_added(const Tokenizer::Impl& impl, const char* name) {
  int32_t id = impl.find_added(name);
  DICE_REQUIRE(id >= 0, "The tokenizer (", impl.origin, ") has no ", name, " token; it is not a Qwen-family chat tokenizer.");
  return id;
}
}  // namespace

int32_t Tokenizer::endoftext_id() const { return require_added(*impl_, "<|endoftext|>"); }
int32_t Tokenizer::im_start_id() const { return require_added(*impl_, "<|im_start|>"); }
int32_t Tokenizer::im_end_id() const { return require_added(*impl_, "<|im_end|>"); }

bool Tokenizer::has_mask_token() const {
  return impl_->find_added("<|MASK|>") >= 0 || impl_->find_added("<MASK>") >= 0;
}

int32_t Tokenizer::mask_token_id() const {
  int32_t id = impl_->find_added("<|MASK|>");
  if (id < 0) id = impl_->find_added("<MASK>");
  DICE_REQUIRE(id >= 0, "The tokenizer (", impl_->origin,
               ") defines no mask token (<|MASK|> or <MASK>); a block-diffusion model needs one — load the "
               "tokenizer from the SDAR model folder, whose tokenizer_config.json or added_tokens.json defines it.");
  return id;
}

std::string Tokenizer::origin() const { return impl_->origin; }

void Tokenizer::set_word_cache(bool on) { impl_->word_cache = on; }

void check_compatible(const Tokenizer& tok, int64_t model_vocab_size, int64_t mask_id) {
  DICE_REQUIRE(tok.vocab_size() <= model_vocab_size, "The tokenizer (", tok.origin(), ") has ids up to ",
               tok.vocab_size() - 1, " but the model's vocabulary has only ", model_vocab_size,
               " entries; use the tokenizer from the model's own folder.");
  if (mask_id < 0) return;
  DICE_REQUIRE(tok.has_mask_token(), "The model uses mask token id ", mask_id, " but the tokenizer (", tok.origin(),
               ") defines no mask token; use the tokenizer from the model's own folder.");
  DICE_REQUIRE(tok.mask_token_id() == mask_id, "The tokenizer's mask token id is ", tok.mask_token_id(),
               " but the model's is ", mask_id, "; the tokenizer (", tok.origin(), ") does not match the model.");
}

}  // namespace dice::text
