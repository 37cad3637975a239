// The loader: this rank's samples of each global batch, with the sequence layout applied once here.
// Global batch c holds global samples [c*B, (c+1)*B); dp rank r takes [r*B/dp, (r+1)*B/dp) of them and,
// of each, the tokens at layout_positions(layout, T, cp, cp_rank) (with cp_a2a = u > 1: the layout over the ring of
// cp / u, and cp rank r takes the (r % u)-th T/cp of ring shard r / u). Targets (token p+1 for global position
// p, -1 at the end) and loss groups are permuted the same way. With data.documents: eot the loader derives each
// position's document start, drops the targets that cross a document boundary, and (layout balanced) chooses
// the assignment of positions to ranks per sample; the batch carries the whole sample's positions and document
// starts in ring order for the ring's document mask, and the scheme the ring runs them with: one call of
// schedule_batch per batch (parallel/schedule/batch_schedule.h), the function `ringtrain plan --doc-lengths` calls.
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
    ring_ = rank.ring > 0 ? rank.ring : rank.cp;
    RT_CHECK(ring_ >= 1 && rank.cp % ring_ == 0, "loader: ring degree " << ring_ << " does not divide cp=" << rank.cp);
    RT_CHECK(rank.layout != "auto", "loader: parallel.layout auto reaches the loader resolved (resolved_layout, "
                                    "framework/plan/trainer_setup.h's loader_rank)");
    layout_ = parse_layout(rank.layout);
    RT_CHECK(layout_ != Layout::balanced || documents_,
             "parallel.layout=balanced needs data.documents: eot; use layout: zigzag");
    RT_CHECK(seq_len_ % rank.cp == 0, "data.seq_len=" << seq_len_ << " is not divisible by cp=" << rank.cp);
    if (layout_ != Layout::balanced) ring_order_ = layout_ring_order(layout_, seq_len_, ring_);
    if (documents_) rule_ = schedule_rule(config, layout_, ring_);
    local_batch_ = global_batch_ / rank.dp;
    tokens_.resize(size_t(local_batch_ * seq_len_));
    targets_.resize(size_t(local_batch_ * seq_len_));
    groups_.resize(size_t(local_batch_ * seq_len_));
    padding_.resize(size_t(local_batch_));
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
    b.group_names = source_->loss_groups();
    read_samples();
    if (documents_) {
      b.doc_pos.resize(size_t(local_batch_ * T));    // (B_local, T)
      b.doc_start.resize(size_t(local_batch_ * T));  // (B_local, T)
      // The batch's orders and scheme, as `ringtrain plan --doc-lengths` reports them (one function for both).
      schedule_ = schedule_batch(starts_, rule_);
      b.ring_layout = schedule_.label;
      b.cp_scheme = schedule_.scheme;
      b.cp_ring_us = schedule_.ring_us, b.cp_gather_us = schedule_.gather_us;
    }
    for (int64_t i = 0; i < local_batch_; ++i) {
      const std::vector<int64_t>& order = documents_ ? schedule_.orders[size_t(i)] : ring_order_;  // (T)
      const std::vector<int64_t>* starts = documents_ ? &starts_[size_t(i)] : nullptr;                // (T)
      const size_t sample = size_t(i * T);
      if (documents_)
        for (int64_t c = 0; c < T; ++c) {
          b.doc_pos[sample + size_t(c)] = order[size_t(c)];
          b.doc_start[sample + size_t(c)] = (*starts)[size_t(order[size_t(c)])];
        }
      const size_t row = size_t(i * T_local);
      for (int64_t j = 0; j < T_local; ++j) {
        const int64_t p = order[size_t(col0 + j)];
        b.tokens[row + size_t(j)] = tokens_[sample + size_t(p)];
        b.targets[row + size_t(j)] = targets_[sample + size_t(p)];
        b.groups[row + size_t(j)] = groups_[sample + size_t(p)];
        const int64_t in_document = documents_ ? p - (*starts)[size_t(p)] : p;
        b.positions[row + size_t(j)] = int32_t(doc_positions_ ? in_document : p);
        b.window_positions[row + size_t(j)] = int32_t(p);
        b.document_positions[row + size_t(j)] = int32_t(in_document);
        if (documents_ && !padding_[size_t(i)]) {  // this rank's query rows: their dropped targets and visible keys
          b.boundary_targets += dropped_[sample + size_t(p)];
          b.visible_pairs += double(in_document + 1);
        }
      }
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
  // This rank's samples of the current batch, whole (B_local, T): tokens, targets (the ones crossing into the next
  // document dropped), loss groups; with documents each position's document start. Marks padding samples.
  void read_samples() {
    const int64_t T = seq_len_;
    if (documents_) {
      starts_.assign(size_t(local_batch_), std::vector<int64_t>(size_t(T), 0));
      dropped_.assign(size_t(local_batch_ * T), 0);
    }
    for (int64_t i = 0; i < local_batch_; ++i) {
      const uint64_t index = cursor_ * uint64_t(global_batch_) + uint64_t(rank_.dp_rank * local_batch_ + i);
      const bool padding = limit_ > 0 && index >= limit_;  // fills the last eval batch: a real window, no targets
      padding_[size_t(i)] = padding ? 1 : 0;
      int32_t* tokens = &tokens_[size_t(i * T)];    // (T)
      int32_t* targets = &targets_[size_t(i * T)];  // (T)
      source_->sample(padding ? index % limit_ : index, T, tokens, targets, &groups_[size_t(i * T)]);
      if (padding) std::fill(targets, targets + T, -1);
      if (!documents_) continue;
      // An EOT token is the first token of the document it starts; a window's first, partial document starts at
      // position 0. The one target that crosses into the next document (predicting its EOT) is dropped.
      std::vector<int64_t>& starts = starts_[size_t(i)];
      uint8_t* dropped = &dropped_[size_t(i * T)];  // (T)
      for (int64_t p = 1; p < T; ++p) starts[size_t(p)] = tokens[p] == eot_ ? p : starts[size_t(p - 1)];
      for (int64_t p = 0; p + 1 < T; ++p)
        if (starts[size_t(p + 1)] == p + 1 && targets[p] >= 0) targets[p] = -1, dropped[p] = 1;
    }
  }

  Layout layout_ = Layout::contiguous;
  bool documents_ = false, doc_positions_ = false;
  ScheduleRule rule_;                   // documents: how each batch's orders and scheme are chosen
  BatchSchedule schedule_;              // documents: the current batch's
  int32_t eot_ = -1;
  int64_t local_batch_ = 0;
  std::vector<std::vector<int64_t>> starts_;  // (B_local, T) documents: each position's document start
  std::vector<uint8_t> dropped_;        // (B_local, T) documents: 1 where the sample's target crossed a boundary
  std::vector<uint8_t> padding_;        // (B_local) 1 for a padding sample (past the sample limit)
  std::vector<int64_t> ring_order_;     // (T) fixed layouts: rank 0's positions, rank 1's, ...
  std::vector<int32_t> tokens_;         // (B_local, T) scratch: this rank's whole global samples
  std::vector<int32_t> targets_;        // (B_local, T)
  std::vector<uint8_t> groups_;         // (B_local, T)
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

ScheduleRule schedule_rule(const Config& config, Layout layout, int ring) {
  ScheduleRule rule;
  rule.layout = layout;
  rule.ring = ring;
  switch (config.parallel.cp_scheme) {
    case CpSchemeSetting::ring: rule.scheme = CpScheme::ring; break;
    case CpSchemeSetting::gather: rule.scheme = CpScheme::gather; break;
    case CpSchemeSetting::automatic: rule.scheme = std::nullopt; break;
  }
  rule.shape = cp_scheme_ring_shape(config, ring);
  return rule;
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
