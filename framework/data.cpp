// The loader: this rank's samples of each global batch, with the sequence layout applied once here.
// Global batch c holds global samples [c*B, (c+1)*B); dp rank r takes [r*B/dp, (r+1)*B/dp) of them and,
// of each, the tokens at layout_positions(layout, T, cp, cp_rank). Targets (token p+1 for global position
// p, -1 at the end) and loss groups are permuted the same way.
#include "framework/data.h"

#include "framework/data_source.h"
#include "kernels/tensor.h"
#include "parallel/layout.h"

namespace rt {
namespace {

class Loader final : public DataLoader {
 public:
  Loader(std::unique_ptr<SampleSource> source, const Config& config, const LoaderRank& rank)
      : source_(std::move(source)), global_batch_(config.train.batch_size), seq_len_(config.data.seq_len),
        rank_(rank) {
    RT_CHECK(rank.dp >= 1 && rank.dp_rank >= 0 && rank.dp_rank < rank.dp,
             "loader: dp_rank " << rank.dp_rank << " is outside [0, dp=" << rank.dp << ")");
    RT_CHECK(rank.cp >= 1 && rank.cp_rank >= 0 && rank.cp_rank < rank.cp,
             "loader: cp_rank " << rank.cp_rank << " is outside [0, cp=" << rank.cp << ")");
    RT_CHECK(global_batch_ % rank.dp == 0, "train.batch_size=" << global_batch_ << " is not divisible by dp="
                                                               << rank.dp << "; use a multiple of " << rank.dp);
    std::string layout = rank.layout;
    if (layout == "auto") layout = rank.cp > 1 ? "zigzag" : "contiguous";
    const std::vector<int64_t> positions = layout_positions(parse_layout(layout), seq_len_, rank.cp, rank.cp_rank);
    positions_.assign(positions.begin(), positions.end());
    local_batch_ = global_batch_ / rank.dp;
    tokens_.resize(size_t(seq_len_));
    targets_.resize(size_t(seq_len_));
    groups_.resize(size_t(seq_len_));
  }

  Batch next() override {
    const int64_t T_local = int64_t(positions_.size());
    Batch b;
    b.batch = local_batch_;
    b.tokens_per_rank = T_local;
    b.positions = positions_;                              // (T_local)
    b.tokens.resize(size_t(local_batch_ * T_local));       // (B_local, T_local)
    b.targets.resize(size_t(local_batch_ * T_local));      // (B_local, T_local)
    b.groups.resize(size_t(local_batch_ * T_local));       // (B_local, T_local)
    b.group_names = source_->loss_groups();
    for (int64_t i = 0; i < local_batch_; ++i) {
      const uint64_t index = cursor_ * uint64_t(global_batch_) + uint64_t(rank_.dp_rank * local_batch_ + i);
      source_->sample(index, seq_len_, tokens_.data(), targets_.data(), groups_.data());  // (T) each
      const size_t row = size_t(i * T_local);
      for (int64_t j = 0; j < T_local; ++j) {
        const size_t p = size_t(positions_[size_t(j)]);
        b.tokens[row + size_t(j)] = tokens_[p];
        b.targets[row + size_t(j)] = targets_[p];
        b.groups[row + size_t(j)] = groups_[p];
      }
    }
    ++cursor_;
    return b;
  }

  uint64_t cursor() const override { return cursor_; }
  void set_cursor(uint64_t cursor) override { cursor_ = cursor; }

 private:
  std::unique_ptr<SampleSource> source_;
  int64_t global_batch_;
  int64_t seq_len_;
  LoaderRank rank_;
  int64_t local_batch_ = 0;
  std::vector<int32_t> positions_;    // (T_local) global positions of this rank's tokens
  std::vector<int32_t> tokens_;       // (T) scratch: one whole global sample
  std::vector<int32_t> targets_;      // (T)
  std::vector<uint8_t> groups_;       // (T)
  uint64_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<DataLoader> make_loader(const Config& config, const LoaderRank& rank, const std::string& split) {
  RT_CHECK(split == "train" || split == "eval", "make_loader: split '" << split << "' must be train or eval");
  const bool eval = split == "eval";
  const std::string& source = config.data.source;
  std::unique_ptr<SampleSource> s;
  if (source == "copy") s = make_copy_source(config, eval);
  else if (source == "bytes") s = make_bytes_source(config, eval);
  else if (source == "shards") s = make_shard_source(config, eval);
  else RT_CHECK(false, "data.source='" << source << "' is not valid; use copy, bytes or shards");
  return std::make_unique<Loader>(std::move(s), config, rank);
}

}  // namespace rt
