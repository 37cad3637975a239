// The synthetic long-range copy task. One sample of length T with span S = data.copy_span:
//   positions [0, S)        random tokens x drawn from [0, vocab-1)
//   position  S             the separator, vocab-1
//   positions [S+1, 2S+1)   x again
//   positions [2S+1, T)     padding (separator tokens, targets ignored)
// Targets are next tokens. Loss groups: first_half for targets inside the first x (unpredictable), repeat_half
// for targets inside the repeat (predictable only by attending S+1 positions back), none for the rest.
#include "framework/base/data_files.h"
#include "framework/data/data_source.h"

namespace rt {
namespace {

class CopySource final : public SampleSource {
 public:
  CopySource(const Config& config, bool eval)
      : seed_(config.data.seed), eval_(eval), vocab_(config.model.vocab_size),
        span_(copy_span_resolved(config.data.seq_len, config.data.copy_span)) {}

  std::vector<std::string> loss_groups() const override { return {"first_half", "repeat_half"}; }

  void sample(uint64_t index, int64_t T, int32_t* tokens, int32_t* targets, uint8_t* groups) const override {
    const int64_t S = span_;
    const int32_t separator = vocab_ - 1;
    const uint64_t key = sample_key(seed_, eval_, index);
    for (int64_t i = 0; i < T; ++i) tokens[i] = separator;
    for (int64_t i = 0; i < S; ++i) {
      const int32_t x = int32_t(uniform_below(mix64(key + uint64_t(i)), uint64_t(vocab_ - 1)));
      tokens[i] = x;
      tokens[S + 1 + i] = x;
    }
    for (int64_t p = 0; p < T; ++p) {
      const bool in_sample = p < 2 * S;  // the target p+1 is still inside the span, separator or repeat
      targets[p] = in_sample ? tokens[p + 1] : -1;
      groups[p] = p < S - 1 ? 1 : (p >= S && p < 2 * S) ? 2 : 0;  // first_half, repeat_half, none
    }
  }

 private:
  uint64_t seed_;
  bool eval_;
  int32_t vocab_;
  int span_;
};

}  // namespace

std::unique_ptr<SampleSource> make_copy_source(const Config& config, bool eval) {
  return std::make_unique<CopySource>(config, eval);
}

}  // namespace rt
