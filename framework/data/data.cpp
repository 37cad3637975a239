// The loader: this rank's samples of each global batch, with the sequence layout applied once here.
// Global batch c holds global samples [c*B, (c+1)*B); dp rank r takes [r*B/dp, (r+1)*B/dp) of them and,
// of each, the tokens at layout_positions(layout, T, cp, cp_rank) (with cp_a2a = u > 1: the layout over the ring of
// cp / u, and cp rank r takes the (r % u)-th T/cp of ring shard r / u). Targets (token p+1 for global position
// p, -1 at the end) and loss groups are permuted the same way. With data.documents: eot the loader derives each
// position's document start, drops the targets that cross a document boundary, and (layout balanced) chooses
// the assignment of positions to ranks per sample; the batch carries the whole sample's positions and document
// starts in ring order for the ring's document mask, and the scheme the ring runs them with (parallel.cp_scheme:
// auto compares the two predictions per batch, parallel/schedule/cp_scheme.h).
#include "framework/data/data.h"

#include <algorithm>

#include "framework/data/data_source.h"
#include "kernels/tensor.h"
#include "parallel/cp/context_attention.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/layout.h"

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
    documents_ = config.data.documents == "eot";
    doc_positions_ = config.data.positions == "document";
    RT_CHECK(documents_ || !doc_positions_, "data.positions=document needs data.documents: eot");
    eot_ = documents_ ? resolved_eot_token(config) : -1;
    RT_CHECK(!documents_ || eot_ >= 0, "data.documents=eot needs data.eot_token");
    std::string layout = rank.layout;
    ring_ = rank.ring > 0 ? rank.ring : rank.cp;
    RT_CHECK(ring_ >= 1 && rank.cp % ring_ == 0, "loader: ring degree " << ring_ << " does not divide cp=" << rank.cp);
    if (layout == "auto") layout = ring_ > 1 ? (documents_ ? "balanced" : "zigzag") : "contiguous";
    layout_ = parse_layout(layout);
    RT_CHECK(layout_ != Layout::balanced || documents_,
             "parallel.layout=balanced needs data.documents: eot; use layout: zigzag");
    RT_CHECK(seq_len_ % rank.cp == 0, "data.seq_len=" << seq_len_ << " is not divisible by cp=" << rank.cp);
    if (layout_ != Layout::balanced) ring_order_ = layout_ring_order(layout_, seq_len_, ring_);
    const std::string& scheme = config.parallel.cp_scheme;
    RT_CHECK(scheme == "ring" || scheme == "gather" || scheme == "auto",
             "parallel.cp_scheme='" << scheme << "' is not valid; use ring, gather or auto");
    if (documents_ && ring_ > 1 && scheme != "ring") {
      scheme_auto_ = scheme == "auto";
      scheme_ = CpScheme::gather;
      ring_shape_ = cp_scheme_ring_shape(config, ring_);
    }
    local_batch_ = global_batch_ / rank.dp;
    tokens_.resize(size_t(seq_len_));
    targets_.resize(size_t(seq_len_));
    groups_.resize(size_t(seq_len_));
  }

  Batch next() override {
    const int64_t T = seq_len_, T_local = T / rank_.cp, col0 = rank_.cp_rank * T_local;
    Batch b;
    b.batch = local_batch_;
    b.tokens_per_rank = T_local;
    b.positions.resize(size_t(local_batch_ * T_local));    // (B_local, T_local)
    b.tokens.resize(size_t(local_batch_ * T_local));       // (B_local, T_local)
    b.targets.resize(size_t(local_batch_ * T_local));      // (B_local, T_local)
    b.groups.resize(size_t(local_batch_ * T_local));       // (B_local, T_local)
    b.window_positions.resize(size_t(local_batch_ * T_local));    // (B_local, T_local)
    b.document_positions.resize(size_t(local_batch_ * T_local));  // (B_local, T_local)
    if (documents_) {
      b.doc_pos.resize(size_t(local_batch_ * T));    // (B_local, T)
      b.doc_start.resize(size_t(local_batch_ * T));  // (B_local, T)
    }
    b.group_names = source_->loss_groups();
    std::vector<int64_t> starts;  // (T) document start of each position (documents only)
    std::vector<CpSchemePrediction> schemes;  // parallel.cp_scheme: auto, per sample
    b.cp_scheme = scheme_;
    for (int64_t i = 0; i < local_batch_; ++i) {
      const uint64_t index = cursor_ * uint64_t(global_batch_) + uint64_t(rank_.dp_rank * local_batch_ + i);
      const bool padding = limit_ > 0 && index >= limit_;  // fills the last eval batch: a real window, no targets
      source_->sample(padding ? index % limit_ : index, T, tokens_.data(), targets_.data(), groups_.data());  // (T)
      if (padding) std::fill(targets_.begin(), targets_.end(), -1);
      const std::vector<int64_t>* order = &ring_order_;
      std::vector<int64_t> sample_order;
      if (documents_) {
        // An EOT token is the first token of the document it starts; a window's first, partial document starts
        // at position 0. The one target that crosses into the next document (predicting its EOT) is dropped.
        starts.assign(size_t(T), 0);
        dropped_.assign(size_t(T), 0);
        for (int64_t p = 1; p < T; ++p) starts[size_t(p)] = tokens_[size_t(p)] == eot_ ? p : starts[size_t(p - 1)];
        for (int64_t p = 0; p + 1 < T; ++p)
          if (starts[size_t(p + 1)] == p + 1 && targets_[size_t(p)] >= 0) targets_[size_t(p)] = -1, dropped_[size_t(p)] = 1;
        std::string chosen = layout_name(layout_);
        if (layout_ == Layout::balanced) {
          if (scheme_ == CpScheme::gather) {  // cp_scheme gather or auto: layout and scheme chosen together
            RingChoice choice = balanced_ring_choice(starts, ring_, ring_shape_, /*with_gather=*/true,
                                                     /*gather_only=*/!scheme_auto_);
            sample_order = std::move(choice.order);
            chosen = choice.label;
          } else {
            sample_order = balanced_ring_order(starts, ring_, &chosen);
          }
          order = &sample_order;
        }
        if (i == 0) b.ring_layout = chosen;
        if (scheme_auto_) schemes.push_back(predict_cp_schemes(starts, *order, ring_, ring_shape_));
        for (int64_t c = 0; c < T; ++c) {
          b.doc_pos[size_t(i * T + c)] = (*order)[size_t(c)];
          b.doc_start[size_t(i * T + c)] = starts[size_t((*order)[size_t(c)])];
        }
      }
      const size_t row = size_t(i * T_local);
      for (int64_t j = 0; j < T_local; ++j) {
        const int64_t p = (*order)[size_t(col0 + j)];
        b.tokens[row + size_t(j)] = tokens_[size_t(p)];
        b.targets[row + size_t(j)] = targets_[size_t(p)];
        b.groups[row + size_t(j)] = groups_[size_t(p)];
        const int64_t in_document = documents_ ? p - starts[size_t(p)] : p;
        b.positions[row + size_t(j)] = int32_t(doc_positions_ ? in_document : p);
        b.window_positions[row + size_t(j)] = int32_t(p);
        b.document_positions[row + size_t(j)] = int32_t(in_document);
        if (documents_ && !padding) {  // this rank's query rows: their dropped targets and visible keys
          b.boundary_targets += dropped_[size_t(p)];
          b.visible_pairs += double(p - starts[size_t(p)] + 1);
        }
      }
    }
    if (scheme_auto_) {
      b.cp_scheme = pick_cp_scheme(schemes);
      for (const CpSchemePrediction& p : schemes) b.cp_ring_us += p.ring.total_us(), b.cp_gather_us += p.gather.total_us();
    }
    ++cursor_;
    return b;
  }

  uint64_t cursor() const override { return cursor_; }
  void set_cursor(uint64_t cursor) override { cursor_ = cursor; }
  uint64_t split_tokens() const override { return source_->split_tokens(); }
  void set_sample_limit(uint64_t limit) override { limit_ = limit; }

 private:
  std::unique_ptr<SampleSource> source_;
  int64_t global_batch_;
  int64_t seq_len_;
  LoaderRank rank_;
  int ring_ = 1;  // ranks the layout is over (cp / cp_a2a)
  Layout layout_ = Layout::contiguous;
  bool documents_ = false, doc_positions_ = false;
  CpScheme scheme_ = CpScheme::ring;  // parallel.cp_scheme with documents on a ring (gather also for auto's ...)
  bool scheme_auto_ = false;          // ... which picks per batch from the predictions for ring_shape_
  RingShape ring_shape_;
  int32_t eot_ = -1;
  int64_t local_batch_ = 0;
  std::vector<uint8_t> dropped_;        // (T) documents: 1 where the sample's target crossed a boundary
  std::vector<int64_t> ring_order_;     // (T) fixed layouts: rank 0's positions, rank 1's, ...
  std::vector<int32_t> tokens_;       // (T) scratch: one whole global sample
  std::vector<int32_t> targets_;      // (T)
  std::vector<uint8_t> groups_;       // (T)
  uint64_t cursor_ = 0;
  uint64_t limit_ = 0;                // global samples at or past it are padding (0 = none)
};

}  // namespace

RingShape cp_scheme_ring_shape(const Config& config, int ring) {
  const ParallelConfig& p = config.parallel;
  const int tp = std::max(1, p.tp), u = std::max(1, p.cp / std::max(1, ring));
  RingAttentionShape rs;
  rs.local_tokens = 1;
  rs.heads = config.model.n_head / tp;
  rs.kv_heads = std::max(1, config.model.n_kv_head / tp);
  rs.head_dim = config.model.head_dim();
  const HeadExchangeShape x = head_exchange_shape(rs, u);
  RingShape shape;
  shape.heads = x.q_heads / x.head_groups;
  shape.kv_heads = x.kv_heads / x.head_groups;
  shape.head_dim = rs.head_dim;
  shape.dkv_wire_bytes = p.dkv_wire == "bf16" ? 2 : 4;
  return shape;  // bf16 K/V: the time model is the H200's
}

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

std::unique_ptr<DataLoader> make_windows_loader(const Config& config, const LoaderRank& rank,
                                                std::vector<Window> windows) {
  const uint64_t count = windows.size();
  auto loader = std::make_unique<Loader>(make_windows_source(config, std::move(windows)), config, rank);
  loader->set_sample_limit(count);
  return loader;
}

}  // namespace rt
