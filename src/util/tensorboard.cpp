// TensorBoard event files (the format is in tensorboard.h).
#include "dice/util/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "dice/util/error.h"

namespace dice::tb {

namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

// protocol buffer encoding: a field's key is (number << 3) | wire type
void varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

template <class T> void fixed(std::string& s, T v) {  // little-endian, as on every machine dice runs on
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

void bytes_field(std::string& s, int field, const std::string& v) {
  varint(s, static_cast<uint64_t>(field) << 3 | 2);
  varint(s, v.size());
  s += v;
}

std::string event(double wall_time, int64_t step) {
  std::string e;
  varint(e, 1 << 3 | 1);  // wall_time: double
  fixed(e, wall_time);
  varint(e, 2 << 3 | 0);  // step: int64
  varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "host";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  path_ = str(dir, "/events.out.tfevents.", static_cast<long long>(std::time(nullptr)), ".", host, ".",
              static_cast<long long>(getpid()));
  out_.open(path_, std::ios::binary | std::ios::app);
  DICE_REQUIRE(out_.is_open(), "Could not create the TensorBoard event file ", path_, ".");
  std::string e = event(static_cast<double>(std::time(nullptr)), 0);
  bytes_field(e, 3, "brain.Event:2");
  record(e);
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time) {
  if (!out_.is_open() || values.empty()) return;
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    varint(value, 2 << 3 | 5);  // simple_value: float
    fixed(value, static_cast<float>(v));
    bytes_field(summary, 1, value);
  }
  std::string e = event(wall_time, step);
  bytes_field(e, 5, summary);
  record(e);
}

void EventWriter::record(const std::string& data) {
  std::string head;
  fixed(head, static_cast<uint64_t>(data.size()));
  std::string frame = head;
  fixed(frame, masked_crc32c(head.data(), head.size()));
  frame += data;
  fixed(frame, masked_crc32c(data.data(), data.size()));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
  out_.flush();
  DICE_REQUIRE(out_.good(), "Could not write to the TensorBoard event file ", path_, ".");
}

}  // namespace dice::tb
