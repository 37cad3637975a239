// llm.c token shards. The files matching data.path are one concatenated token stream (sorted by name);
// training samples are windows of T tokens at offsets drawn from (seed, sample index); held-out sample k is the
// window [k*T, (k+1)*T) of the held-out split (consecutive, non-overlapping). Windows may cross a shard boundary.
// The held-out split is the stream's last 10%, or the files matching data.eval_path.
// Shards hold uint16 or uint32 tokens (framework/base/data_files.h); one stream may mix both.
// Validation: every header up front (magic, version, token count vs file size); tokens >= vocab_size are
// refused by a full scan up front when the files hold at most kFullScanTokens tokens, and in every window
// read otherwise. The shards are read, not mapped (DataFileReader): a shard truncated or rewritten under a running
// job is an error naming the file and the byte offset, not SIGBUS.
#include <algorithm>
#include <cstring>

#include "framework/base/data_files.h"
#include "framework/base/run_errors.h"
#include "framework/data/data_source.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

constexpr uint64_t kFullScanTokens = uint64_t(1) << 30;  // 2 GiB of uint16: a few seconds at start-up

constexpr uint64_t kScanTokens = uint64_t(1) << 20;  // tokens per read of the full scan

struct Shard {
  std::unique_ptr<DataFileReader> file;
  uint64_t first = 0;  // index of its first token in the concatenated stream
  uint64_t count = 0;
  int token_bytes = 2;  // 2: uint16 (magic 20240520), 4: uint32 (magic 20240801)
  // Tokens [i, i + n) of this shard into out (n).
  void read_tokens(uint64_t i, uint64_t n, uint32_t* out) const {
    std::vector<uint8_t> raw(size_t(n * uint64_t(token_bytes)));  // (n * token_bytes) little-endian tokens
    file->read(kShardHeaderBytes + i * uint64_t(token_bytes), raw.size(), raw.data());
    for (uint64_t k = 0; k < n; ++k) {
      if (token_bytes == 2) {
        uint16_t t;
        std::memcpy(&t, raw.data() + 2 * k, 2);
        out[k] = t;
      } else {
        std::memcpy(&out[k], raw.data() + 4 * k, 4);
      }
    }
  }
  uint32_t token(uint64_t i) const {
    uint32_t t = 0;
    read_tokens(i, 1, &t);
    return t;
  }
};

// A data error (exit 2), also when found mid-run in a window of shards too large for the scan up front.
[[noreturn]] void bad_token(const Shard& shard, uint64_t i, int32_t vocab) {
  const uint64_t token = shard.token(i);
  throw RunError(kExitUsage, "shard '" + shard.file->path() + "': token " + std::to_string(token) + " at token index " +
              std::to_string(i) + " is >= model.vocab_size=" + std::to_string(vocab) +
              "; set model.vocab_size to at least " + std::to_string(token + 1) +
              " (GPT-2 tokenised shards need 50257, Llama 3 128256), or check that the shard was made with this "
              "vocabulary");
}

class ShardSource final : public SampleSource {
 public:
  ShardSource(const Config& config, bool eval) : seed_(config.data.seed), eval_(eval), vocab_(config.model.vocab_size) {
    const bool own_eval_files = eval && !config.data.eval_path.empty();
    const std::string& pattern = own_eval_files ? config.data.eval_path : config.data.path;
    const char* key = own_eval_files ? "data.eval_path" : "data.path";
    const std::vector<std::string> files = expand_data_paths(pattern);
    RT_CHECK(!files.empty(), key << "='" << pattern << "' matches no file; fix the path or glob");
    uint64_t total = 0;
    for (const std::string& f : files) {
      int token_bytes = 2;
      const uint64_t count = read_shard_header(f, &token_bytes);
      Shard s;
      s.token_bytes = token_bytes;
      s.file = std::make_unique<DataFileReader>(f);
      RT_CHECK(s.file->size() == kShardHeaderBytes + count * uint64_t(token_bytes),
               "shard '" << f << "' changed size while being opened; is something still writing it?");
      s.first = total;
      s.count = count;
      total += count;
      shards_.push_back(std::move(s));
    }
    full_scan_ = total <= kFullScanTokens;
    if (full_scan_) {
      std::vector<uint32_t> chunk;  // (kScanTokens) one read of the scan
      for (const Shard& s : shards_)
        for (uint64_t at = 0; at < s.count; at += kScanTokens) {
          const uint64_t n = std::min(kScanTokens, s.count - at);
          chunk.resize(size_t(n));
          s.read_tokens(at, n, chunk.data());
          for (uint64_t k = 0; k < n; ++k)
            if (chunk[size_t(k)] >= uint32_t(vocab_)) bad_token(s, at + k, vocab_);
        }
    }
    begin_ = 0;
    end_ = total;
    if (config.data.eval_path.empty()) {
      const uint64_t held = uint64_t(double(total) * kHeldOutFraction);
      if (eval) begin_ = total - held;
      else end_ = total - held;
    }
    RT_CHECK(end_ - begin_ >= uint64_t(config.data.seq_len),
             key << "='" << pattern << "': the " << (eval ? "held-out" : "training") << " part has "
                 << end_ - begin_ << " tokens, fewer than data.seq_len=" << config.data.seq_len
                 << "; use more data or a shorter seq_len");
  }

  uint64_t split_tokens() const override { return end_ - begin_; }

  void sample(uint64_t index, int64_t T, int32_t* tokens, int32_t* targets, uint8_t* groups) const override {
    uint64_t pos = eval_ ? begin_ + eval_window_offset(index, T, end_ - begin_)
                         : begin_ + uniform_below(sample_key(seed_, eval_, index), end_ - begin_ - uint64_t(T) + 1);
    // The shard holding `pos`: the last one whose first token is <= pos.
    auto it = std::upper_bound(shards_.begin(), shards_.end(), pos,
                               [](uint64_t p, const Shard& s) { return p < s.first; });
    size_t shard = size_t(it - shards_.begin()) - 1;
    int64_t filled = 0;
    std::vector<uint32_t> window(static_cast<size_t>(T));  // (T) this sample's tokens as read
    while (filled < T) {
      const Shard& s = shards_[shard];
      const uint64_t offset = pos - s.first;
      const int64_t take = int64_t(std::min<uint64_t>(s.count - offset, uint64_t(T - filled)));
      s.read_tokens(offset, uint64_t(take), window.data() + filled);
      for (int64_t i = 0; i < take; ++i) {
        const uint32_t t = window[size_t(filled + i)];
        if (!full_scan_ && t >= uint32_t(vocab_)) bad_token(s, offset + uint64_t(i), vocab_);
        tokens[filled + i] = int32_t(t);
      }
      filled += take;
      pos += uint64_t(take);
      ++shard;
    }
    next_token_targets(T, tokens, targets, groups);
  }

 private:
  uint64_t seed_;
  bool eval_;
  int32_t vocab_;
  bool full_scan_ = true;
  std::vector<Shard> shards_;
  uint64_t begin_ = 0, end_ = 0;  // token range of this split in the concatenated stream
};

}  // namespace

std::unique_ptr<SampleSource> make_shard_source(const Config& config, bool eval) {
  return std::make_unique<ShardSource>(config, eval);
}

}  // namespace rt
