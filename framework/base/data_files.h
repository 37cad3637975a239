// Data files on disk (internal to framework/data_*.cpp and config validation): path globs, read-only
// memory maps, checked reads of training data, and llm.c shard headers. Every failure names the file and the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt {

// A file or a glob pattern ("data/fineweb_train_*.bin") -> the matching files, sorted. Empty if none.
std::vector<std::string> expand_data_paths(const std::string& pattern);

// A read-only memory map of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws rt::Error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// A data file the loader reads for the whole run (token shards, byte-level text): read, not mapped, so that a file
// truncated or rewritten under a running job is an error naming the file and the byte offset (exit 2 on every
// rank that reads it) instead of SIGBUS. Each read first compares the file's size and modification time with those
// seen at open. Reads may come from several threads (pread; no shared position).
class DataFileReader {
 public:
  explicit DataFileReader(const std::string& path);  // throws rt::RunError (kExitUsage) naming the file
  ~DataFileReader();
  DataFileReader(const DataFileReader&) = delete;
  DataFileReader& operator=(const DataFileReader&) = delete;
  // bytes [offset, offset + bytes) into dst; throws RunError (kExitUsage) naming the file and the byte offset when
  // the file changed since it was opened or the read comes back short.
  void read(uint64_t offset, uint64_t bytes, void* dst) const;
  uint64_t size() const { return size_; }  // at open
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void changed(uint64_t offset, uint64_t bytes, const std::string& what) const;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  int64_t mtime_ns_ = 0;  // at open
};

// llm.c token shards (dev/data/data_common.py): 256 int32 header (magic, version, token count), then the
// tokens. Exactly two formats exist: (20240520, 1) with uint16 tokens (GPT-2) and (20240801, 7) with uint32
// tokens (Llama 3).
constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr uint64_t kShardHeaderBytes = 256 * sizeof(int32_t);

// Reads and checks a shard's header against its file size; returns the token count and sets *token_bytes
// (2 or 4) when given. Throws rt::Error naming the file and the field (magic, version, token count, truncation).
uint64_t read_shard_header(const std::string& path, int* token_bytes = nullptr);

// The copy task's span length: data.copy_span, or (seq_len - 1) / 2 when 0.
int copy_span_resolved(int seq_len, int copy_span);

// The share of a single source held out for evaluation when no eval_path is given (its tail).
constexpr double kHeldOutFraction = 0.1;

}  // namespace rt
