#pragma once
// TensorBoard event files, written by dice itself: `tensorboard --logdir runs/` reads a run's
// scalars without TensorFlow or PyTorch on either side.
//
// The format (TensorFlow's TFRecord framing of `Event` protocol buffers):
//   record = uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
//   masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8, c = CRC-32C (Castagnoli) of x
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record of a file is an Event with file_version "brain.Event:2".
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace dice::tb {

// CRC-32C of data (the checksum TFRecord uses), and its masked form.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class EventWriter {
 public:
  EventWriter() = default;
  // Starts a new file `events.out.tfevents.<unix time>.<host>.<pid>` in dir (created if needed).
  explicit EventWriter(const std::string& dir);
  bool is_open() const { return out_.is_open(); }
  const std::string& path() const { return path_; }
  // One Event at `step` holding every (tag, value) as a scalar; flushed, so a reader sees it at once
  // and a killed run loses nothing written before.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time);

 private:
  void record(const std::string& data);
  std::ofstream out_;
  std::string path_;
};

}  // namespace dice::tb
