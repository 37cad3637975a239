// The ZeRO-3 weight all-gather in E4M3 (fp8.zero3_gather: fp8, issue 44; DESIGN.md "Sharded training state"). Under
// parallel.zero 3 every unit's compute weights are all-gathered from the dp x cp shards before use
// (framework/model/model_shards.cpp). For the units of the FP8 blocks this sends, instead of the activation dtype,
// each weight matrix as E4M3 codes with one f32 factor per matrix (1 byte an element instead of 2), and dequantizes
// them into the gather slot, so everything downstream reads the same slot as under bf16:
//   - groups: the GEMM weight operands of the block, exactly as Fp8Linear quantizes them (wq, wk, wv, wo, fc | the
//     fused [w1; w3], proj | w2); a group's span runs to the next parameter, over the alignment gap (zeros).
//   - amax per group: over this rank's part of it, then the max over dp x cp and over tp (the ranks Fp8Linear reduces a
//     weight's amax over), NaN propagating; taken once per change of the weights (Model::sync_compute_weights: init,
//     load, every update), as two small all-gathers of every covered unit's amaxes.
//   - codes: this rank's part of each group quantized with that amax (fp8_quantize, tensor scaling: the factor of
//     kernels/fp8.h), written at its place in the unit's code buffer; the code buffer is all-gathered in place.
//   - 1-D parameters (the two norm weights): never E4M3 (3 mantissa bits); each rank packs its part of them into its
//     row of a second, small all-gather in the activation dtype (rows padded to the longest rank's part).
//   - decode: fp8_dequantize of each group (codes x factor) and the 1-D parts copied to their places.
// Exactness: the tensorwise recipe re-quantizes the dequantized matrix with the amax it holds, which is the gathered
// amax (the element that was coded 448 comes back as the amax: exactly on bf16 GPUs, within an f32 rounding on CPU
// ranks), so it finds the same codes and (on GPUs) the same factor: the run matches the bf16 gather's
// (tests/mpi/test_fp8_grids.cpp measures it). Rowwise and block recipes would quantize the already rounded weights
// again per row or block; the config refuses them (framework/config/config_validate.cpp).
// Memory: two code buffers (the layer slots' units, 1 byte an element) and two 1-D rows x shards, from the arena.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "framework/model/model.h"
#include "kernels/arena.h"
#include "parallel/comm/comm.h"

namespace rt {

// One unit's E4M3 gather, in elements relative to the unit's start (pure; no memory).
struct Fp8GatherPlan {
  struct Span {
    int64_t begin = 0, end = 0;
  };
  struct Piece {
    int64_t begin = 0, end = 0, at = 0;  // [begin, end) of the unit, at `at` of its rank's packed row
  };
  int64_t numel = 0, shards = 1, per = 0;  // the unit's elements, its shards, the elements of one shard
  std::vector<Span> groups;                // the weight matrices: one factor each (64-element aligned spans)
  std::vector<Span> plain;                 // the 1-D parameters, exactly (the gaps after them are not sent)
  std::vector<std::vector<Piece>> plain_of_rank;  // per rank: its parts of `plain`, packed
  int64_t plain_cap = 0;                   // a packed row: the longest rank's parts
  // Rank r's parts of the groups: (group index, unit-relative span); at most one per group.
  std::vector<std::pair<int, Span>> group_pieces(int rank) const;
};

// The plan of `unit` whose parameters are `params` (their offsets into the flat buffers), split in `shards`. 2-D
// parameters are groups (SwiGLU's mlp.w1 and the w3 after it one group: Fp8Linear's one operand), 1-D ones plain.
Fp8GatherPlan make_fp8_gather_plan(const std::vector<const ParamEntry*>& params, const ParamUnit& unit, int shards);

// An (n/128, 128) or (n/64, 64) view of a flat span (n a multiple of 64): the shape the FP8 ops read fastest.
Tensor fp8_gather_rows(const Tensor& flat);

class ZeroFp8Gather {
 public:
  // covered[u]: unit u is gathered in E4M3 (the units of the FP8 blocks). act: the compute weights' dtype.
  // tp: null or a group of one when the weights are not split over tp.
  ZeroFp8Gather(const ParamLayout& layout, const std::vector<bool>& covered, int shards, int shard_rank, DType act,
                Comm& dp_cp, Comm* tp, Arena& arena);

  bool covers(int unit) const { return unit >= 0 && unit < int(covered_.size()) && covered_[size_t(unit)]; }
  const Fp8GatherPlan& plan(int unit) const { return plans_[size_t(unit)]; }

  // After the compute weights change: every covered unit's group amaxes over `local` (this rank's compute shards of
  // all units, laid out as Model::compute()), reduced over dp x cp and tp. Collective over both. Returns the bytes
  // its all-gathers received (for ZeroStats).
  double take_amaxes(const Tensor& local);

  // The two all-gathers of one unit (send is recv's own block: in place). plain_* are undefined when the unit has no
  // 1-D parameter.
  struct Exchange {
    Tensor codes_send, codes_recv;  // (per) / (numel) e4m3
    Tensor plain_send, plain_recv;  // (cap) / (shards * cap) act
  };
  // This rank's part of `unit` (`shard`: (per) act, the unit's part of the local buffers) quantized into code buffer
  // `buffer` (0 or 1: the two layer slots) and its 1-D parts packed; returns what to all-gather.
  Exchange encode(int unit, int buffer, const Tensor& shard);
  // After both all-gathers of `buffer` completed: the unit's weights into out ((numel) act, the gather slot); the
  // gaps after the 1-D parameters and the unit's padding are left as they were (no view reads them).
  void decode(int unit, int buffer, Tensor out);

 private:
  Tensor amax_of(int unit, int group) const;  // (1) f32

  std::vector<bool> covered_;
  std::vector<Fp8GatherPlan> plans_;  // per unit (empty for the ones not covered)
  std::vector<int64_t> local_begin_;  // per unit: where this rank's part starts in the local buffers
  int shards_, rank_, groups_max_ = 0;
  Comm* dp_cp_;
  Comm* tp_;
  Tensor codes_[2];  // (largest covered unit) e4m3: a layer slot's codes, gathered in place
  Tensor plain_[2];  // (shards * largest plain_cap) act: the 1-D parameters' rows, gathered in place
  Tensor amax_;      // (units * groups_max_) f32: per unit and group, reduced after take_amaxes
  Tensor gathered_;  // (max(shards, tp) * units * groups_max_) f32: the amaxes all-gathered
  Tensor factor_;    // (1) f32: fp8_quantize's factor output (the decode derives it from the amax again)
};

}  // namespace rt
