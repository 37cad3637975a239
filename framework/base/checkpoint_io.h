// Durable file writing and checksums for checkpoints (internal to framework/checkpoint*.cpp and
// framework/checkpoint/safetensors.cpp). Every failure is an rt::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace rt {

// Writes a file and fsyncs it before close. Throws on any short write (e.g. a full disk).
class DurableFileWriter {
 public:
  explicit DurableFileWriter(const std::string& path);
  ~DurableFileWriter();  // closes (without fsync) if commit() was not reached
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;
  void write(const void* data, size_t bytes);
  void commit();  // fsync + close

 private:
  std::string path_;
  int fd_ = -1;
};

void write_file_durably(const std::string& path, const std::string& contents);
// fsync on a directory makes the creation/rename of its entries durable.
void fsync_directory(const std::string& path);

// Creates the directory final_dir, which must not exist and must name a directory (no trailing '/', not "" or
// "."), all at once: fill(tmp) writes into the temporary sibling .tmp_<name>, which is then renamed into place.
// Whatever fill or the rename throws (a full disk included), the temporary is removed and the error is thrown
// again, saying so; nothing is left behind. option_hint names what chose the path (e.g. "--out").
// replace (--overwrite): final_dir may exist as a directory; it is replaced only once the new one is complete
// (renamed aside, the new one renamed into place, then the old one removed).
void write_new_directory(const std::string& final_dir, const std::string& option_hint,
                         const std::function<void(const std::string& tmp_dir)>& fill, bool replace = false);

// A fast 64-bit checksum (four independent multiply-rotate lanes over 8-byte words, then the tail bytes),
// written as "rt64:<16 hex digits>". Detects flipped bytes and truncation; not cryptographic.
uint64_t checksum64(const uint8_t* data, size_t bytes);
std::string file_checksum(const std::string& path, uint64_t* bytes);

}  // namespace rt
