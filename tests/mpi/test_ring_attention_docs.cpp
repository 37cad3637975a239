// Ring attention with a document mask (RingAttention::set_documents) on real ranks, against the whole sample on
// one rank (test::document_attention_reference: the CPU kernels with the same document mask, themselves checked
// against fp64 in tests/unit/kernels/test_attention_docs_cpu.cpp): O, LSE, dQ, dK, dV for cp in {1, 2, 3, 4}, for
// contiguous, zigzag, striped, balanced (each sample's order from its documents) and docpack, and for a random
// per-sample assignment of positions to ranks (any assignment works); GQA; a document spanning every rank; length-1
// documents; a ring whose off-diagonal steps are all masked skips them without changing the result; and the hop
// skipping (parallel/schedule/ring_hops.h): a block travels as far as its farthest user, and short documents move a
// fraction
// of the plain ring's bytes. The gather scheme (RingGatherDocs, parallel.cp_scheme: gather) on the same cases, the
// mask-area dispatch and positions in random local order added: the same results, and exactly its plan's bytes; and
// with the backward's own call split in two at forced key rows (middle, inside a document, edges). Every ring is built
// with RT_ATTN_WORK_LIST set: 0 (the one launches as attn_fwd_whole_two_kv / attn_bwd_block_fresh_two_kv) but in
// WorkListForwardMatchesOneRank, 1 (the default, the work lists; tests/mpi/test_ring_gather_work_list.cpp has more).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/doc_dispatch.h"
#include "parallel/schedule/doc_pack.h"
#include "parallel/schedule/gather_plan.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"
#include "tests/mpi/scoped_env.h"

using namespace rt;

namespace {

constexpr double kTolerance = 2e-5;  // relative L2 error vs the one-rank result (f32 compute)
const int64_t kB = 2, kH = 4, kHkv = 2, kD = 8;

using rt::test::document_starts;
using rt::test::world_rank;
using rt::test::world_size;

// The harness's ring orders (tests/mpi/ring_attention_harness.h) for this file's kB samples.
std::vector<int64_t> layout_order(Layout layout, int64_t T, int cp) {
  return test::layout_ring_order(layout, kB, T, cp);
}
std::vector<int64_t> random_order(int64_t T, int cp, uint64_t seed, bool sorted = true) {
  return test::random_ring_order(kB, T, cp, seed, sorted);
}

// Rows of x (B, T, row) at per-sample positions order (B, n): (B, n, row).
std::vector<float> gather(const std::vector<float>& x, int64_t T, int64_t row, const std::vector<int64_t>& order,
                          int64_t n, int64_t ring_T, int64_t col0) {
  std::vector<float> out(size_t(kB * n * row));  // (B, n, row)
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < row; ++e)
        out[size_t((b * n + t) * row + e)] = x[size_t((b * T + order[size_t(b * ring_T + col0 + t)]) * row + e)];
  return out;
}

// What a ring moved, summed over its ranks (MPI_Allreduce), its hop plan and the scheme it ran.
struct RingStats {
  double sent_bytes = 0, ring_bytes = 0, planned_bytes = 0;
  std::vector<int> kv_hops;  // (cp) RingHopPlan::kv_hops
  CpScheme scheme = CpScheme::ring;
  int64_t own_split = 0;     // this rank's gather own backward split (RingAttention::gather_own_split)
  bool fwd_one_launch = false;  // this rank's gather forward in one launch (RingAttention::gather_fwd_one_launch)
  bool bwd_one_launch = false;  // and its backward (RingAttention::gather_bwd_one_launch)
  bool fwd_work_list = false;   // its one-launch forward over the work list (RingAttention::gather_fwd_work_list)
};

// How run_docs_ring runs the ring: the scheme set_documents gets (gather: the ring is built with its buffers) and
// the dK/dV dtype on the wire.
struct RingRun {
  CpScheme scheme = CpScheme::ring;
  DType dkv_wire = DType::f32;
  int64_t own_split = -1;  // gather: the own backward call's split forced at this key row (-1: the plan's choice)
  int fwd_one_launch = -1;  // gather: the forward in one launch forced off (0) or on (1) (-1: the plan's choice)
  int bwd_one_launch = -1;  // gather: the backward likewise
  // gather: RT_ATTN_WORK_LIST=1 while the ring is constructed (the forward's work list, the default), else
  // RT_ATTN_WORK_LIST=0 (attn_fwd_whole_two_kv): set explicitly either way, so each form is tested by name
  bool work_list = false;
};

// order (B, T): per sample, the positions held by rank 0, then rank 1, ... (each rank's in its local order).
// Runs the ring on world ranks [0, cp) and returns the relative errors against one_rank (summed over ranks) and
// this rank's skipped steps.
test::RelErrors run_docs_ring(const test::AttentionProblem& p, const std::vector<int64_t>& order,
                              const std::vector<std::vector<int64_t>>& lengths, int cp, Layout layout,
                              double* bad, int64_t* skipped, RingStats* stats = nullptr, RingRun run = {}) {
  const int64_t T = p.T, n = T / cp;
  std::vector<std::vector<int64_t>> nat_start;  // [b] (T) natural order
  std::vector<int64_t> ring_pos(size_t(kB * T)), ring_start(size_t(kB * T));  // (B, T) ring order
  for (int64_t b = 0; b < kB; ++b) {
    nat_start.push_back(document_starts(T, lengths[size_t(b) % lengths.size()]));
    const std::vector<int64_t>& s = nat_start.back();
    for (int64_t t = 0; t < T; ++t) {
      ring_pos[size_t(b * T + t)] = order[size_t(b * T + t)];
      ring_start[size_t(b * T + t)] = s[size_t(order[size_t(b * T + t)])];
    }
  }
  const bool member = world_rank() < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  test::ErrSum err[test::kNumQuantities];
  *skipped = 0;
  if (member) {
    const test::AttentionReference ref1 = test::document_attention_reference(p, nat_start);
    const std::vector<double>* ref[test::kNumQuantities] = {&ref1.out, &ref1.lse, &ref1.dq, &ref1.dk, &ref1.dv};
    MpiComm ring(sub, /*owned=*/true);
    const int r = ring.rank();
    Arena arena(Device::cpu(), size_t(4) << 20);
    Tensor q = arena.alloc(DType::f32, {kB, n, kH, kD}, "q"), k = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "k");
    Tensor v = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "v"), dout = arena.alloc(DType::f32, {kB, n, kH, kD}, "do");
    Tensor out = arena.alloc(DType::f32, {kB, n, kH, kD}, "o"), lse = arena.alloc(DType::f32, {kB, kH, n}, "lse");
    Tensor dq = arena.alloc(DType::f32, {kB, n, kH, kD}, "dq"), dk = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "dk");
    Tensor dv = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "dv");
    test::upload(q, gather(p.q, T, kH * kD, order, n, T, r * n));
    test::upload(k, gather(p.k, T, kHkv * kD, order, n, T, r * n));
    test::upload(v, gather(p.v, T, kHkv * kD, order, n, T, r * n));
    test::upload(dout, gather(p.dout, T, kH * kD, order, n, T, r * n));
    for (const Tensor& t : {out, lse, dq, dk, dv}) fill(t, std::nanf(""));  // poison
    test::ScopedEnv work_list_env("RT_ATTN_WORK_LIST", run.work_list ? "1" : "0");
    RingAttention attn(ring, layout, /*causal=*/true, {kB, n, kH, kHkv, kD, DType::f32}, arena, run.dkv_wire,
                       /*gather=*/run.scheme == CpScheme::gather);
    work_list_env.restore();
    if (run.own_split >= 0) attn.set_gather_own_split(run.own_split);
    if (run.fwd_one_launch >= 0) attn.set_gather_fwd_one_launch(run.fwd_one_launch);
    if (run.bwd_one_launch >= 0) attn.set_gather_bwd_one_launch(run.bwd_one_launch);
    attn.set_documents(ring_pos.data(), ring_start.data(), nullptr, nullptr, run.scheme);
    attn.forward(q, k, v, out, lse);
    attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
    *skipped = attn.skipped_steps();
    if (stats) {
      double bytes[2] = {attn.timings().sent_bytes, attn.timings().ring_bytes};
      ring.all_reduce_sum(bytes, 2);
      *stats = {bytes[0], bytes[1], attn.planned_bytes_per_layer(), attn.hop_plan().kv_hops, attn.scheme(),
                attn.gather_own_split(), attn.gather_fwd_one_launch(), attn.gather_bwd_one_launch(),
                attn.gather_fwd_work_list()};
    }
    // Un-permute: this rank's rows are at the positions of its columns (the same for every sample here only if
    // the order is; compare per sample).
    const std::vector<float> got[test::kNumQuantities] = {test::download(out), test::download(lse),
                                                          test::download(dq), test::download(dk),
                                                          test::download(dv)};
    const int64_t rows[test::kNumQuantities] = {kH * kD, kH, kH * kD, kHkv * kD, kHkv * kD};
    for (int qn = 0; qn < test::kNumQuantities; ++qn)
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < rows[qn]; ++c) {
            const int64_t gp = order[size_t(b * T + r * n + t)];
            const bool token_major = qn != test::kLse;
            const double g = token_major ? got[qn][size_t((b * n + t) * rows[qn] + c)]
                                         : got[qn][size_t((b * kH + c) * n + t)];
            const double w = token_major ? (*ref[qn])[size_t((b * T + gp) * rows[qn] + c)]
                                         : (*ref[qn])[size_t((b * kH + c) * T + gp)];
            if (!std::isfinite(g)) err[qn].bad += 1;
            err[qn].diff2 += (g - w) * (g - w);
            err[qn].ref2 += w * w;
          }
  }
  return test::reduce_errors(err, bad);
}

// parallel.layout: balanced: each sample's ring order from its documents (balanced_ring_order, as the loader
// picks it); the candidates chosen are appended to *chosen.
std::vector<int64_t> balanced_order(int64_t T, int cp, const std::vector<std::vector<int64_t>>& lengths,
                                    std::vector<std::string>* chosen) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < kB; ++b) {
    std::string name;
    const std::vector<int64_t> starts = document_starts(T, lengths[size_t(b) % lengths.size()]);
    const std::vector<int64_t> o = balanced_ring_order(starts, cp, &name);
    order.insert(order.end(), o.begin(), o.end());
    chosen->push_back(name);
  }
  return order;
}

// The mask-area dispatch's order of each sample (dispatch_ring_order, chunks of 5 tokens).
std::vector<int64_t> dispatch_order(int64_t T, int cp, const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int64_t> o = dispatch_ring_order(document_starts(T, lengths[size_t(b) % lengths.size()]), cp, 5);
    order.insert(order.end(), o.begin(), o.end());
  }
  return order;
}

// The docpack order of each sample (docpack_ring_order), documents of split_min tokens or more split over the ring.
std::vector<int64_t> docpack_order(int64_t T, int cp, const std::vector<std::vector<int64_t>>& lengths,
                                   int64_t split_min) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int64_t> starts = document_starts(T, lengths[size_t(b) % lengths.size()]);
    const std::vector<int64_t> o = docpack_ring_order(starts, cp, split_min);
    order.insert(order.end(), o.begin(), o.end());
  }
  return order;
}

void expect_close(const test::RelErrors& rel, double bad, const std::string& what) {
  EXPECT_EQ(bad, 0) << "non-finite outputs: " << what;
  for (int i = 0; i < test::kNumQuantities; ++i)
    EXPECT_LT(rel[size_t(i)], kTolerance) << test::kQuantityNames[i] << " " << what;
  if (world_rank() == 0)
    std::printf("  %s rel err: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e\n", what.c_str(), rel[0], rel[1], rel[2],
                rel[3], rel[4]);
}

// Sample 0: short documents (length 1 among them); sample 1: one document over every rank.
const std::vector<std::vector<int64_t>> kMix = {{1, 7, 1, 23, 2, 40, 5, 1}, {1 << 20}};

}  // namespace

TEST(RingAttentionDocs, EveryLayoutAndAnyAssignmentMatchOneRank) {
  const int64_t T = 120;  // divisible by 2*cp for cp = 1..4
  const test::AttentionProblem p = test::make_attention_problem(4321, kB, T, kH, kHkv, kD, false);
  for (int cp = 1; cp <= std::min(4, world_size()); ++cp) {
    for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
      double bad = 0;
      int64_t skipped = 0;
      const test::RelErrors rel = run_docs_ring(p, layout_order(layout, T, cp), kMix, cp, layout, &bad, &skipped);
      expect_close(rel, bad, std::string(layout_name(layout)) + " cp=" + std::to_string(cp));
    }
    double bad = 0;
    int64_t skipped = 0;
    const test::RelErrors rel =
        run_docs_ring(p, random_order(T, cp, 99 + uint64_t(cp)), kMix, cp, Layout::contiguous, &bad, &skipped);
    expect_close(rel, bad, "random per-sample assignment cp=" + std::to_string(cp));
    // The balanced layout on two mixes: the short-document one (per-sample orders differ) and documents of
    // 13 / 29 / 3 tokens, whose edges fall inside chunks.
    for (const auto& mix : {kMix, std::vector<std::vector<int64_t>>{{13, 29, 3}, {60, 1, 59}}}) {
      std::vector<std::string> chosen;
      const std::vector<int64_t> order = balanced_order(T, cp, mix, &chosen);
      const test::RelErrors relb = run_docs_ring(p, order, mix, cp, Layout::balanced, &bad, &skipped);
      std::string names;
      for (const std::string& c : chosen) names += " " + c;
      expect_close(relb, bad, "balanced (" + names.substr(1) + ") cp=" + std::to_string(cp));
      // docpack forced (balanced may not pick it at this size): short documents whole on one rank, those of 8
      // tokens or more split over the ring; and every document whole where it fits.
      for (int64_t split_min : {int64_t(8), int64_t(1) << 30}) {
        const test::RelErrors reld =
            run_docs_ring(p, docpack_order(T, cp, mix, split_min), mix, cp, Layout::balanced, &bad, &skipped);
        expect_close(reld, bad, "docpack split_min=" + std::to_string(split_min) + " cp=" + std::to_string(cp));
      }
    }
  }
}

// Contiguous layout with every document exactly one rank's chunk: every off-diagonal step sees no pair, so each
// rank skips cp-1 forward and cp-1 backward steps, and the result is still exact (no K/V hop is needed either).
TEST(RingAttentionDocs, FullyMaskedStepsAreSkipped) {
  const int cp = std::min(4, world_size());
  const int64_t T = 120, n = T / cp;
  const test::AttentionProblem p = test::make_attention_problem(8765, kB, T, kH, kHkv, kD, false);
  double bad = 0;
  int64_t skipped = 0;
  const test::RelErrors rel =
      run_docs_ring(p, layout_order(Layout::contiguous, T, cp), {{n}}, cp, Layout::contiguous, &bad, &skipped);
  expect_close(rel, bad, "documents = chunks, cp=" + std::to_string(cp));
  if (world_rank() < cp) {
    EXPECT_EQ(skipped, 2 * (cp - 1)) << "rank " << world_rank();
  }
  // Shifting the documents by one token makes the previous rank's block visible to ranks > 0 (rank 0 still skips
  // every later block, all in its future).
  const test::RelErrors rel2 = run_docs_ring(p, layout_order(Layout::contiguous, T, cp), {{1, n}}, cp,
                                             Layout::contiguous, &bad, &skipped);
  expect_close(rel2, bad, "documents across chunks, cp=" + std::to_string(cp));
  if (world_rank() >= 1 && world_rank() < cp) {
    EXPECT_LT(skipped, 2 * (cp - 1)) << "rank " << world_rank();
  }
}

// The skip logic (parallel/schedule/ring_hops.h) on a case where a far rank needs a block: contiguous, cp = 4, 30
// tokens per
// rank; the first document spans ranks 0-3, so block 0 must travel 3 hops (and its dK/dV come back from rank 3),
// while the later blocks hold short documents and travel less. Skipping a needed hop would leave a stale buffer in
// the step that uses it, so the result against one rank would be far off.
TEST(RingAttentionDocs, NeededBlocksTravelAsFarAsTheirFarthestUser) {
  const int cp = 4;
  if (world_size() < cp) GTEST_SKIP() << "needs 4 ranks";
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(2468, kB, T, kH, kHkv, kD, false);
  // Sample 0: a 100-token document from position 0 (ranks 0-3), then short ones; sample 1: length-1 documents
  // and odd lengths, none crossing a rank's edge except 31..33.
  const std::vector<std::vector<int64_t>> mix = {{100, 7, 13}, {1, 29, 3, 27, 1, 1, 29, 29}};
  double bad = 0;
  int64_t skipped = 0;
  RingStats stats;
  const test::RelErrors rel =
      run_docs_ring(p, layout_order(Layout::contiguous, T, cp), mix, cp, Layout::contiguous, &bad, &skipped, &stats);
  expect_close(rel, bad, "a document over every rank, contiguous cp=4");
  if (world_rank() < cp) {
    ASSERT_EQ(stats.kv_hops.size(), size_t(cp));
    EXPECT_EQ(stats.kv_hops[0], 3) << "block 0 is seen by rank 3's queries";
    EXPECT_EQ(stats.kv_hops[3], 0) << "nothing after rank 3 in a contiguous ring: block 3 stays home";
    EXPECT_LT(stats.sent_bytes, stats.ring_bytes);
    EXPECT_NEAR(stats.sent_bytes, stats.planned_bytes, 1e-6 * stats.planned_bytes);
  }
}

// The bytes saved where most blocks are not needed: short documents in the contiguous layout, cp = 4. Only the
// documents across a rank's edge need a hop: the ring moves what the plan says, a small part of the plain ring's.
TEST(RingAttentionDocs, ShortDocumentsMoveFewBytes) {
  const int cp = std::min(4, world_size());
  if (cp < 3) GTEST_SKIP() << "needs 3 ranks";
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(1357, kB, T, kH, kHkv, kD, false);
  const std::vector<std::vector<int64_t>> mix = {{1, 7, 1, 3, 2, 5, 5, 1}, {4, 1, 2, 3}};
  double bad = 0;
  int64_t skipped = 0;
  RingStats stats;
  const test::RelErrors rel =
      run_docs_ring(p, layout_order(Layout::contiguous, T, cp), mix, cp, Layout::contiguous, &bad, &skipped, &stats);
  expect_close(rel, bad, "short documents, contiguous cp=" + std::to_string(cp));
  if (world_rank() < cp) {
    for (int s = 0; s < cp; ++s) EXPECT_LE(stats.kv_hops[size_t(s)], 1) << "block " << s;
    EXPECT_NEAR(stats.sent_bytes, stats.planned_bytes, 1e-6 * stats.planned_bytes);
    // K/V: at most one hop per block and pass (against cp-1); dK/dV: at most one (against cp-1).
    EXPECT_LE(stats.sent_bytes, stats.ring_bytes / (cp - 1) + 1);
    EXPECT_GT(stats.sent_bytes, 0) << "documents cross the ranks' edges: some hop is needed";
    if (world_rank() == 0)
      std::printf("  short documents, contiguous cp=%d: %.0f bytes sent of the ring's %.0f (%.1f%%)\n", cp,
                  stats.sent_bytes, stats.ring_bytes, 100 * stats.sent_bytes / stats.ring_bytes);
  }
}

// ---- The gather scheme (parallel.cp_scheme: gather; parallel/cp/ring_attention_gather.cpp) ----

// Every rank receives exactly the key rows its queries see and runs its own and the gathered call: O, LSE, dQ, dK, dV
// equal one rank's (and so the ring's, held to the same reference above) on every layout, on any assignment (also
// with each rank's positions in random local order), for cp = 2..4, two samples with different documents (length-1
// documents, one document over every rank, odd lengths whose edges fall inside chunks). The ring really ran the
// gather, and what it sent is what its plan says.
TEST(RingGatherDocs, EveryLayoutAndAnyAssignmentMatchOneRank) {
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(9753, kB, T, kH, kHkv, kD, false);
  const RingRun gather{CpScheme::gather, DType::f32};
  for (int cp = 2; cp <= std::min(4, world_size()); ++cp)
    for (const auto& mix : {kMix, std::vector<std::vector<int64_t>>{{13, 29, 3}, {60, 1, 59}}}) {
      const std::string m = mix == kMix ? " (short + one spanning)" : " (odd lengths)";
      std::vector<std::pair<std::string, std::vector<int64_t>>> orders;
      for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
        orders.push_back({layout_name(layout), layout_order(layout, T, cp)});
      std::vector<std::string> chosen;
      orders.push_back({"balanced", balanced_order(T, cp, mix, &chosen)});
      orders.push_back({"dispatch", dispatch_order(T, cp, mix)});
      orders.push_back({"docpack", docpack_order(T, cp, mix, 8)});
      orders.push_back({"random sorted", random_order(T, cp, 7 + uint64_t(cp))});
      orders.push_back({"random unsorted", random_order(T, cp, 17 + uint64_t(cp), /*sorted=*/false)});
      for (const auto& [name, order] : orders) {
        double bad = 0;
        int64_t skipped = 0;
        RingStats stats;
        const test::RelErrors rel = run_docs_ring(p, order, mix, cp, Layout::balanced, &bad, &skipped, &stats, gather);
        expect_close(rel, bad, "gather " + name + m + " cp=" + std::to_string(cp));
        if (world_rank() < cp) {
          EXPECT_EQ(stats.scheme, CpScheme::gather) << name << m << " cp=" << cp;
          EXPECT_NEAR(stats.sent_bytes, stats.planned_bytes, 1e-9 * stats.ring_bytes) << name << m << " cp=" << cp;
        }
      }
    }
}

// The bytes: short documents in the contiguous layout only need the rows of the documents across a rank's edge. The
// ring sends exactly its plan's rows (kv_gather_plan_for_order, checked against every (query, key) pair in
// tests/unit/parallel/test_kv_gather.cpp): K|V forward and backward and dK|dV back, summed over samples and ranks.
// Documents that are exactly the ranks' chunks need no row at all: nothing is sent, and each rank skips its gathered
// call in both passes.
TEST(RingGatherDocs, SendsExactlyThePlannedRows) {
  const int cp = std::min(4, world_size());
  if (cp < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t T = 120, n = T / cp;
  const test::AttentionProblem p = test::make_attention_problem(3141, kB, T, kH, kHkv, kD, false);
  const std::vector<std::vector<int64_t>> mix = {{1, 7, 1, 3, 2, 5, 5, 1}, {4, 1, 2, 3}};
  const std::vector<int64_t> order = layout_order(Layout::contiguous, T, cp);
  double rows = 0;  // rows received over the ranks and samples, from the plan
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int64_t> sample_order(order.begin() + b * T, order.begin() + (b + 1) * T);  // (T)
    rows += double(kv_gather_plan_for_order(document_starts(T, mix[size_t(b)]), sample_order, cp).total_rows());
  }
  ASSERT_GT(rows, 0) << "documents cross the ranks' edges: some row is needed";
  const double row_bytes = double(kHkv * kD * 4);  // one f32 row of K (or V, dK, dV)
  double bad = 0;
  int64_t skipped = 0;
  RingStats stats;
  const RingRun gather{CpScheme::gather, DType::f32};
  const test::RelErrors rel =
      run_docs_ring(p, order, mix, cp, Layout::contiguous, &bad, &skipped, &stats, gather);
  expect_close(rel, bad, "gather, short documents, contiguous cp=" + std::to_string(cp));
  if (world_rank() < cp) {
    EXPECT_DOUBLE_EQ(stats.sent_bytes, rows * row_bytes * 6) << "K, V twice and dK, dV once per received row";
    EXPECT_DOUBLE_EQ(stats.planned_bytes, stats.sent_bytes);
    EXPECT_LT(stats.sent_bytes, 0.2 * stats.ring_bytes);
    if (world_rank() == 0)
      std::printf("  gather, short documents, contiguous cp=%d: %.0f bytes sent of the ring's %.0f (%.1f%%)\n", cp,
                  stats.sent_bytes, stats.ring_bytes, 100 * stats.sent_bytes / stats.ring_bytes);
  }
  const test::RelErrors rel0 =
      run_docs_ring(p, order, {{n}}, cp, Layout::contiguous, &bad, &skipped, &stats, gather);
  expect_close(rel0, bad, "gather, documents = chunks, cp=" + std::to_string(cp));
  if (world_rank() < cp) {
    EXPECT_EQ(stats.sent_bytes, 0);
    EXPECT_EQ(skipped, 2) << "rank " << world_rank() << ": the gathered call, forward and backward";
  }
}

// The backward's own call split in two (parallel/cp/gather_backward.h: part A before the gathered call, part B under
// the dK/dV return), forced at a key row (the chooser never splits calls of under 256 rows): in the middle, inside a
// document (sample 1 is one document over every rank; for sample 0 a row whose predecessor on rank 0 shares its
// document), at a document's edge, at the first and the last row; two samples, so the parts run as key ranges. The
// same results as one rank, on layouts where ranks receive rows and on one with random local order.
TEST(RingGatherDocs, ForcedOwnSplitMatchesOneRank) {
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(8642, kB, T, kH, kHkv, kD, false);
  for (int cp = 2; cp <= std::min(4, world_size()); ++cp) {
    const int64_t n = T / cp;
    const std::vector<int64_t> sample0 = document_starts(T, kMix[0]);  // by position
    std::vector<std::pair<std::string, std::vector<int64_t>>> orders;
    for (Layout layout : {Layout::contiguous, Layout::zigzag})
      orders.push_back({layout_name(layout), layout_order(layout, T, cp)});
    orders.push_back({"dispatch", dispatch_order(T, cp, kMix)});
    orders.push_back({"random unsorted", random_order(T, cp, 29 + uint64_t(cp), /*sorted=*/false)});
    for (const auto& [name, order] : orders) {
      int64_t inside = -1, edge = -1;  // on rank 0's rows of sample 0: rows m - 1 and m in one document, or not
      for (int64_t m = n / 3; m < n && (inside < 0 || edge < 0); ++m) {
        const bool same = sample0[size_t(order[size_t(m - 1)])] == sample0[size_t(order[size_t(m)])];
        if (same && inside < 0) inside = m;
        if (!same && edge < 0) edge = m;
      }
      ASSERT_GT(inside, 0) << name << " cp=" << cp;
      std::vector<int64_t> splits = {n / 2, inside, 1, n - 1};
      if (edge > 0) splits.push_back(edge);
      std::sort(splits.begin(), splits.end());
      splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
      for (int64_t m : splits) {
        double bad = 0;
        int64_t skipped = 0;
        RingStats stats;
        const std::string what = "gather, own split at " + std::to_string(m) + " of " + std::to_string(n) + ", " +
                                 name + " cp=" + std::to_string(cp);
        const test::RelErrors rel = run_docs_ring(p, order, kMix, cp, Layout::balanced, &bad, &skipped, &stats,
                                                  RingRun{CpScheme::gather, DType::f32, m});
        expect_close(rel, bad, what);
        if (world_rank() < cp) {
          EXPECT_EQ(stats.own_split, m) << what;
        }
      }
    }
  }
}

// The forward in one launch over own keys and gathered rows (attn_fwd_whole_two_kv after the exchange), forced on
// (and the backward, attn_bwd_block_fresh_two_kv, forced on or off with it, and with a forced own split that the
// one launch must ignore): the same results as one rank on layouts where ranks receive rows (contiguous, zigzag, the
// dispatch, a random assignment in random local order), odd documents (kMix) and two samples; a rank that receives
// rows reports each form it runs.
TEST(RingGatherDocs, ForcedOneLaunchForwardMatchesOneRank) {
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(9753, kB, T, kH, kHkv, kD, false);
  for (int cp = 2; cp <= std::min(4, world_size()); ++cp) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> orders;
    for (Layout layout : {Layout::contiguous, Layout::zigzag})
      orders.push_back({layout_name(layout), layout_order(layout, T, cp)});
    orders.push_back({"dispatch", dispatch_order(T, cp, kMix)});
    orders.push_back({"random unsorted", random_order(T, cp, 41 + uint64_t(cp), /*sorted=*/false)});
    for (const auto& [name, order] : orders)
      for (int bwd_one : {0, 1}) {
        double bad = 0;
        int64_t skipped = 0;
        RingStats stats;
        const std::string what = "gather, forward in one launch, backward " +
                                 std::string(bwd_one ? "in one launch" : "in three calls") + ", " + name +
                                 " cp=" + std::to_string(cp);
        RingRun run{CpScheme::gather, DType::f32, bwd_one ? T / cp / 2 : -1};
        run.fwd_one_launch = 1;
        run.bwd_one_launch = bwd_one;
        const test::RelErrors rel = run_docs_ring(p, order, kMix, cp, Layout::balanced, &bad, &skipped, &stats, run);
        expect_close(rel, bad, what);
        int on[2] = {0, 0};  // ranks running the forward / the backward in one launch
        if (world_rank() < cp) on[0] = stats.fwd_one_launch ? 1 : 0, on[1] = stats.bwd_one_launch ? 1 : 0;
        MPI_Allreduce(MPI_IN_PLACE, on, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        EXPECT_GT(on[0], 0) << what << ": no rank ran its forward in one launch";
        if (bwd_one) EXPECT_GT(on[1], 0) << what << ": no rank ran its backward in one launch";
        else EXPECT_EQ(on[1], 0) << what << ": a rank ran its backward in one launch, forced off";
      }
  }
}

// The one-launch forward over the batch's work list (the default, RT_ATTN_WORK_LIST=1: attn_fwd_work_list, kernels/
// attn_work_list.h, the list from parallel/schedule/doc_work_list.h) against one rank, on calls of several 128-row
// query and key tiles (T = 1200: 300 to 600 rows a rank): contiguous, zigzag and a random assignment in random local
// order, odd documents (kMix) and two samples; every rank that runs its forward in one launch runs it over the list.
TEST(RingGatherDocs, WorkListForwardMatchesOneRank) {
  const int64_t T = 1200;
  const test::AttentionProblem p = test::make_attention_problem(4242, kB, T, kH, kHkv, kD, false);
  for (int cp = 2; cp <= std::min(4, world_size()); cp += 2) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> orders;
    for (Layout layout : {Layout::contiguous, Layout::zigzag})
      orders.push_back({layout_name(layout), layout_order(layout, T, cp)});
    orders.push_back({"random unsorted", random_order(T, cp, 77 + uint64_t(cp), /*sorted=*/false)});
    for (const auto& [name, order] : orders) {
      double bad = 0;
      int64_t skipped = 0;
      RingStats stats;
      const std::string what = "gather, forward over the work list, " + name + " cp=" + std::to_string(cp);
      RingRun run{CpScheme::gather, DType::f32};
      run.fwd_one_launch = 1;
      run.work_list = true;
      const test::RelErrors rel = run_docs_ring(p, order, kMix, cp, Layout::balanced, &bad, &skipped, &stats, run);
      expect_close(rel, bad, what);
      int on[2] = {0, 0};  // ranks running the forward in one launch / over the work list
      if (world_rank() < cp) on[0] = stats.fwd_one_launch ? 1 : 0, on[1] = stats.fwd_work_list ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, on, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_GT(on[1], 0) << what << ": no rank ran its forward over the work list";
      EXPECT_EQ(on[0], on[1]) << what << ": a rank ran its one-launch forward without the work list";
    }
  }
}

// The chooser's split on the CPU's small calls: none (a part under 128 key rows is never chosen).
TEST(RingGatherDocs, ChosenOwnSplitIsNoneForSmallCalls) {
  const int cp = std::min(4, world_size());
  if (cp < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(1357, kB, T, kH, kHkv, kD, false);
  double bad = 0;
  int64_t skipped = 0;
  RingStats stats;
  const test::RelErrors rel = run_docs_ring(p, layout_order(Layout::contiguous, T, cp), kMix, cp, Layout::contiguous,
                                            &bad, &skipped, &stats, RingRun{CpScheme::gather, DType::f32});
  expect_close(rel, bad, "gather, the chooser's split, cp=" + std::to_string(cp));
  if (world_rank() < cp) {
    EXPECT_EQ(stats.own_split, 0);
  }
}

// parallel.dkv_wire: bf16 rounds the returned dK/dV rows once; the forward and dQ are untouched by it.
TEST(RingGatherDocs, Bf16WireRoundsOnlyTheReturnedGradients) {
  const int cp = std::min(4, world_size());
  if (cp < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t T = 120;
  const test::AttentionProblem p = test::make_attention_problem(2718, kB, T, kH, kHkv, kD, false);
  double bad = 0;
  int64_t skipped = 0;
  const test::RelErrors rel = run_docs_ring(p, layout_order(Layout::zigzag, T, cp), kMix, cp, Layout::zigzag, &bad,
                                            &skipped, nullptr, RingRun{CpScheme::gather, DType::bf16});
  EXPECT_EQ(bad, 0);
  for (int i : {test::kOut, test::kLse, test::kDq}) EXPECT_LT(rel[size_t(i)], kTolerance) << test::kQuantityNames[i];
  for (int i : {test::kDk, test::kDv}) {
    EXPECT_LT(rel[size_t(i)], 4e-3) << test::kQuantityNames[i] << ": more than a bf16 rounding of the returned rows";
    EXPECT_GT(rel[size_t(i)], 1e-6) << test::kQuantityNames[i] << ": no rounding seen: did the rows travel in bf16?";
  }
}

// A ring built without the gather's buffers refuses the scheme with a message that names the fix.
TEST(RingGatherDocs, RefusedWithoutItsBuffers) {
  MpiComm world(MPI_COMM_WORLD, /*owned=*/false);
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t n = 8, T = n * world.size();
  Arena arena(Device::cpu(), size_t(1) << 20);
  RingAttention attn(world, Layout::contiguous, /*causal=*/true, {1, n, kH, kHkv, kD, DType::f32}, arena);
  std::vector<int64_t> pos(static_cast<size_t>(T)), start(static_cast<size_t>(T), 0);
  std::iota(pos.begin(), pos.end(), 0);
  try {
    attn.set_documents(pos.data(), start.data(), nullptr, nullptr, CpScheme::gather);
    ADD_FAILURE() << "set_documents accepted the gather scheme without its buffers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gather = true"), std::string::npos) << e.what();
  }
}
