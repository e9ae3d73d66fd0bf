#pragma once
// Hashing: SHA-256 (content-addressed build cache, checkpoint checksums) and FNV-1a (fast keys).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dice::hash {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n_bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex_digest();  // finalizes; 64 lowercase hex chars

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);
std::string sha256_file_hex(const std::string& path);
uint64_t fnv1a64(const void* data, size_t n_bytes, uint64_t seed = 0xcbf29ce484222325ULL);
inline uint64_t fnv1a64(std::string_view s) { return fnv1a64(s.data(), s.size()); }

}  // namespace dice::hash
