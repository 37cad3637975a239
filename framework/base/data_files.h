// Data files on disk (internal to framework/data_*.cpp and config validation): path globs, read-only
// memory maps, and llm.c shard headers. Every failure names the file and the field.
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
