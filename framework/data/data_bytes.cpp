// Byte-level text: every byte is a token (vocab 256). Training samples are windows of T bytes at offsets drawn
// from (seed, sample index); held-out sample k is the window [k*T, (k+1)*T) of the held-out split. The held-out
// split is the file's last 10%, or data.eval_path. The file is read, not mapped (DataFileReader): a file truncated
// or rewritten under a running job is an error naming it and the byte offset, not SIGBUS.
#include <vector>

#include "framework/base/data_files.h"
#include "framework/data/data_source.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

class BytesSource final : public SampleSource {
 public:
  BytesSource(const Config& config, bool eval) : seed_(config.data.seed), eval_(eval) {
    const std::string& path = eval && !config.data.eval_path.empty() ? config.data.eval_path : config.data.path;
    file_ = std::make_unique<DataFileReader>(path);
    const uint64_t n = file_->size();
    begin_ = 0;
    end_ = n;
    if (config.data.eval_path.empty()) {
      const uint64_t held = uint64_t(double(n) * kHeldOutFraction);
      if (eval) begin_ = n - held;
      else end_ = n - held;
    }
    const uint64_t T = uint64_t(config.data.seq_len);
    RT_CHECK(end_ - begin_ >= T, "data file '" << path << "': the " << (eval ? "held-out" : "training")
                                               << " part has " << end_ - begin_ << " bytes, fewer than data.seq_len="
                                               << T << "; use more data or a shorter seq_len");
  }

  uint64_t split_tokens() const override { return end_ - begin_; }

  void sample(uint64_t index, int64_t T, int32_t* tokens, int32_t* targets, uint8_t* groups) const override {
    const uint64_t start =
        eval_ ? begin_ + eval_window_offset(index, T, end_ - begin_)
              : begin_ + uniform_below(sample_key(seed_, eval_, index), end_ - begin_ - uint64_t(T) + 1);
    std::vector<uint8_t> bytes(static_cast<size_t>(T));  // (T) the window
    file_->read(start, uint64_t(T), bytes.data());
    for (int64_t i = 0; i < T; ++i) tokens[i] = bytes[size_t(i)];
    next_token_targets(T, tokens, targets, groups);
  }

 private:
  uint64_t seed_;
  bool eval_;
  std::unique_ptr<DataFileReader> file_;
  uint64_t begin_ = 0, end_ = 0;  // byte range of this split
};

}  // namespace

std::unique_ptr<SampleSource> make_bytes_source(const Config& config, bool eval) {
  return std::make_unique<BytesSource>(config, eval);
}

}  // namespace rt
