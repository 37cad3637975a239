// A data source produces whole global sequences by index (internal to framework/data_*.cpp); the loader
// (data.cpp) picks this rank's samples and applies the sequence layout.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"

namespace rt {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Global sample `index` (cursor * batch_size + sample index in the global batch), all T positions:
  // tokens (T), targets (T; target of position p is the token at p+1, -1 = ignored, the last one is -1)
  // and groups (T; Batch::groups, 0 = none). Deterministic in (seed, split, index).
  virtual void sample(uint64_t index, int64_t T, int32_t* tokens, int32_t* targets, uint8_t* groups) const = 0;
  // The names of the loss groups the source reports (group g = loss_groups()[g - 1]); none by default.
  virtual std::vector<std::string> loss_groups() const { return {}; }
  // The split's tokens (bytes for data.source: bytes); 0 for a generated split without an end (the copy task).
  // A file source's held-out split is read in order: sample k is the window [k*T, (k+1)*T) of the split.
  virtual uint64_t split_tokens() const { return 0; }
};

std::unique_ptr<SampleSource> make_copy_source(const Config& config, bool eval);
std::unique_ptr<SampleSource> make_bytes_source(const Config& config, bool eval);
std::unique_ptr<SampleSource> make_shard_source(const Config& config, bool eval);
// make_windows_loader (data.h): sample k is windows[k]; checks each has data.seq_len tokens and targets.
std::unique_ptr<SampleSource> make_windows_source(const Config& config, std::vector<Window> windows);

// splitmix64 finaliser: a good 64-bit mix, used as a counter-based RNG.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [0, n) from 64 random bits (multiply-shift; bias < n / 2^64).
inline uint64_t uniform_below(uint64_t bits, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(bits) * n) >> 64);
}
// Key of one sample: distinct streams for train and eval.
inline uint64_t sample_key(uint64_t seed, bool eval, uint64_t index) {
  return mix64(mix64(seed) ^ (eval ? 0x5EED0E7A15EED0E7ull : 0x7A1B5EEDull) ^ mix64(index * 2 + 1));
}
// Offset in the held-out split of held-out window `index` (consecutive, non-overlapping windows of T tokens).
// The loader never asks past the last whole window (it pads the last batch instead); the modulo only keeps a
// stray index inside the split.
inline uint64_t eval_window_offset(uint64_t index, int64_t T, uint64_t split_tokens) {
  const uint64_t windows = split_tokens / uint64_t(T);
  return (index % windows) * uint64_t(T);
}
// Plain next-token targets of a token window: targets[p] = tokens[p+1], the last is -1; no loss groups.
inline void next_token_targets(int64_t T, const int32_t* tokens, int32_t* targets, uint8_t* groups) {
  for (int64_t p = 0; p < T; ++p) {
    targets[p] = p + 1 < T ? tokens[p + 1] : -1;
    groups[p] = 0;
  }
}

}  // namespace rt
