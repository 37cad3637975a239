// Data sources and the loader (DESIGN.md "One training step"): each rank gets its token shard with the
// sequence layout's permutation applied, the global positions and the labels.
//   copy:   synthetic long-range copy task. Each sample: a random span of tokens, a separator, then the
//           same span again (the repeat can only be predicted by attending back across the sequence).
//   bytes:  a text file, byte-level, vocab 256.
//   shards: llm.c token shards: header of 256 int32 (magic 20240520, version 1, token count), then uint16
//           tokens. Every header field is validated with a clear error; tokens >= vocab are refused.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/schedule/batch_schedule.h"
#include "parallel/schedule/cp_scheme.h"

namespace rt {

// A data source may sort its targets into named loss groups whose mean losses the trainer reports next to the
// overall loss (the copy task: "first_half", unpredictable, and "repeat_half", predictable only by attending back).
// Batch::groups[i] is 0 for a target in no group, else g, the group named group_names[g - 1].
struct Batch {
  int64_t batch = 0;                 // B_local sequences (global batch / dp)
  int64_t tokens_per_rank = 0;       // T_local = seq_len / cp
  std::vector<int32_t> tokens;       // (B_local, T_local) inputs, layout order
  std::vector<int32_t> targets;      // (B_local, T_local) next-token labels, -1 = ignored
  std::vector<int32_t> positions;    // (B_local, T_local) RoPE positions of this rank's tokens (data.positions:
                                     // global = position in the sample; document = position in its document)
  // Whatever data.positions says (read by `ringtrain eval --task loss-by-position`):
  std::vector<int32_t> window_positions;    // (B_local, T_local) position of each token in its sample (window)
  std::vector<int32_t> document_positions;  // (B_local, T_local) position in its document (data.documents: eot;
                                            // without documents the window is one document: = window_positions)
  // data.documents: eot only (else empty): every position of each sample in ring order (rank s's tokens at
  // columns [s*T_local, (s+1)*T_local)) and the first position of its document (RingAttention::set_documents).
  std::vector<int64_t> doc_pos;      // (B_local, T)
  std::vector<int64_t> doc_start;    // (B_local, T)
  // data.documents: eot only: the ring order of this rank's first sample, as `ringtrain plan --doc-lengths` names
  // it (layout balanced: the chooser's pick, e.g. docpack(2048/runs); else the layout's name).
  std::string ring_layout;
  // data.documents: eot on a ring of more than one rank: how the ring moves K/V for this batch (parallel.cp_scheme;
  // auto: the scheme of least predicted time over the batch's samples, parallel/schedule/cp_scheme.h). Every rank of a ring
  // reads the same samples, so every rank picks alike. cp_ring_us / cp_gather_us: with auto, the two predictions
  // (forward + backward per layer, microseconds, summed over the samples); 0 otherwise.
  CpScheme cp_scheme = CpScheme::ring;
  double cp_ring_us = 0, cp_gather_us = 0;
  // data.documents: eot only (else 0), over this rank's tokens (so a sum over the dp x cp ranks is the global
  // batch's): targets dropped because they cross into the next document (the EOT predicted from the previous
  // document), and the visible (query, key) pairs of these query rows (doc_start(i) <= j <= i: pos - start + 1).
  int64_t boundary_targets = 0;
  double visible_pairs = 0;
  std::vector<uint8_t> groups;       // (B_local, T_local) loss group of each target, 0 = none
  std::vector<std::string> group_names;  // the source's loss groups (SampleSource::loss_groups)
};

struct LoaderRank {
  int dp = 1, dp_rank = 0;           // this rank reads samples [dp_rank*B/dp, (dp_rank+1)*B/dp) of each global batch
  int cp = 1, cp_rank = 0;           // and the tokens at layout_positions(layout, seq_len, cp, cp_rank)
  // The ring degree cp / cp_a2a: the layout is over the ring; ring shard s is cp ranks [s*u, (s+1)*u), each taking
  // consecutive T/cp of its tokens (u = 1: the layout over cp, as before).
  int ring = 0;                      // 0 = cp
  std::string layout = "contiguous"; // resolved layout name (contiguous | zigzag | striped)
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // The next global batch's slice for this rank. Deterministic in (seed, cursor): every rank of a job,
  // and a resumed job, sees the same global batch for the same cursor.
  virtual Batch next() = 0;
  virtual uint64_t cursor() const = 0;           // global batches consumed
  virtual void set_cursor(uint64_t cursor) = 0;  // for resume
  // The split's tokens (bytes for data.source: bytes); 0 for a generated split (the copy task). The held-out
  // split of a file source is read in order: global sample k is its window [k*seq_len, (k+1)*seq_len).
  virtual uint64_t split_tokens() const = 0;
  // Global samples with an index >= limit are padding (they fill the last eval batch): no targets, no counts.
  // 0 = no limit.
  virtual void set_sample_limit(uint64_t limit) = 0;
};

// split: "train" or "eval" (held-out: a disjoint seed stream for copy; eval_path or the file's tail else).
// Validates files up front (missing file, bad header, truncation, token >= vocab) with rt::Error.
std::unique_ptr<DataLoader> make_loader(const Config& config, const LoaderRank& rank, const std::string& split);

// A loader over given windows instead of config.data.source (`ringtrain eval --task needle`): global sample k is
// windows[k] (tokens and next-token targets, -1 = no target; each of data.seq_len entries), with the config's grid,
// layout and documents applied as to any other source. Past the last window: padding (set_sample_limit is set).
struct Window {
  std::vector<int32_t> tokens;   // (T)
  std::vector<int32_t> targets;  // (T)
};
std::unique_ptr<DataLoader> make_windows_loader(const Config& config, const LoaderRank& rank,
                                                std::vector<Window> windows);

// The ring's shape per rank that parallel.cp_scheme: auto prices the schemes with (parallel/schedule/cp_scheme.h): the query
// and KV heads of a tp rank after the all-to-all's split over u = cp / ring, per head group; bf16 K/V (the time model
// is the H200's) and parallel.dkv_wire.
RingShape cp_scheme_ring_shape(const Config& config, int ring);

// data.documents: eot: a warning naming data.eot_token when it occurs in none of the first `samples` training
// samples (every sample would train as one document); "" when it occurs, or without documents.
// The rule the loader schedules each batch of packed documents by (schedule_batch, parallel/schedule/batch_schedule.h):
// `layout` over a ring of `ring` ranks, parallel.cp_scheme (auto: per batch), priced at cp_scheme_ring_shape.
// `ringtrain plan --doc-lengths` schedules its windows by the same rule.
ScheduleRule schedule_rule(const Config& config, Layout layout, int ring);

constexpr int kEotCheckSamples = 16;  // the trainer's `samples`
std::string eot_absence_warning(const Config& config, int samples);

// data.documents: eot: the document start of every position (T each) of the first `samples` training samples, as the
// loader finds them (an EOT starts a document; a window's first, partial one starts at 0). Empty without documents.
// parallel.cp_a2a: auto reads them (framework/plan/a2a_auto.h).
std::vector<std::vector<int64_t>> first_samples_doc_starts(const Config& config, int samples);

}  // namespace rt
