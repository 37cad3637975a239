// The gather scheme's one-launch backward over the backward's work list on CPU ranks (RT_ATTN_WORK_LIST=1, the
// default: attn_bwd_work_list, kernels/attn_work_list.h, the list from doc_bwd_work_list_mirror in
// parallel/schedule/doc_work_list.h, built in plan_gather): against the whole sample on one rank
// (test::document_attention_reference), and bit for bit against the same ring with the lists off (RT_ATTN_WORK_LIST=0:
// attn_fwd_whole_two_kv and attn_bwd_block_fresh_two_kv, whose bits the list ops keep on the host). Calls of several
// 128-row tiles (T = 1200: 300 to 600 rows a rank), contiguous, zigzag and a random assignment in random local order;
// sample 0 short documents (length 1 among them), sample 1 one document across every rank; GQA (H = 4, Hkv = 2),
// B = 2; outputs NaN-poisoned first. Every rank whose backward runs in one launch must run it over the list.
// The default: a ring built with RT_ATTN_WORK_LIST unset runs both lists, with the bits of RT_ATTN_WORK_LIST=1; any
// value but 0 and 1 is refused, the message naming both and the default.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/gather_scheme.h"
#include "parallel/cp/ring_attention.h"
#include "parallel/schedule/layout.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"
#include "tests/mpi/scoped_env.h"

using namespace rt;

namespace {

constexpr double kTolerance = 2e-5;  // relative L2 error vs the one-rank result (f32 compute)
const int64_t kB = 2, kH = 4, kHkv = 2, kD = 8;
// Sample 0: short documents (length 1 among them); sample 1: one document over every rank.
const std::vector<std::vector<int64_t>> kMix = {{1, 7, 1, 23, 2, 40, 5, 1}, {1 << 20}};

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

// One member rank's outputs of a gather ring: O, LSE, dQ, dK, dV as computed (this rank's rows), and its plan's forms.
struct GatherOutputs {
  std::vector<float> got[test::kNumQuantities];
  bool bwd_one_launch = false, bwd_work_list = false, fwd_work_list = false;
};

// order (B, T): per sample, the positions held by rank 0, then rank 1, ... Runs the gather scheme (forward and
// backward in one launch where the rank receives rows) on world ranks [0, cp), RT_ATTN_WORK_LIST=list_env while the
// ring is constructed (nullptr: unset, the default). Members return their outputs and add their errors against `ref`
// into err.
GatherOutputs run_gather(const test::AttentionProblem& p, const test::AttentionReference& ref,
                         const std::vector<int64_t>& order, const std::vector<std::vector<int64_t>>& nat_start, int cp,
                         const char* list_env, test::ErrSum (&err)[test::kNumQuantities]) {
  const int64_t T = p.T, n = T / cp;
  std::vector<int64_t> ring_pos(size_t(kB * T)), ring_start(size_t(kB * T));  // (B, T) ring order
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < T; ++t) {
      ring_pos[size_t(b * T + t)] = order[size_t(b * T + t)];
      ring_start[size_t(b * T + t)] = nat_start[size_t(b)][size_t(order[size_t(b * T + t)])];
    }
  const bool member = world_rank() < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  GatherOutputs o;
  if (!member) return o;
  MpiComm ring(sub, /*owned=*/true);
  const int r = ring.rank();
  Arena arena(Device::cpu(), size_t(8) << 20);
  Tensor q = arena.alloc(DType::f32, {kB, n, kH, kD}, "q"), k = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "k");
  Tensor v = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "v"), dout = arena.alloc(DType::f32, {kB, n, kH, kD}, "do");
  Tensor out = arena.alloc(DType::f32, {kB, n, kH, kD}, "o"), lse = arena.alloc(DType::f32, {kB, kH, n}, "lse");
  Tensor dq = arena.alloc(DType::f32, {kB, n, kH, kD}, "dq"), dk = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "dk");
  Tensor dv = arena.alloc(DType::f32, {kB, n, kHkv, kD}, "dv");
  // This rank's rows of each sample, as positions (B, n).
  std::vector<int64_t> mine(size_t(kB * n));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < n; ++t) mine[size_t(b * n + t)] = order[size_t(b * T + r * n + t)];
  auto rows_of = [&](const std::vector<float>& x, int64_t row) {
    std::vector<float> y(size_t(kB * n * row));  // (B, n, row)
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(x.begin() + (b * T + mine[size_t(b * n + t)]) * row, row, y.begin() + (b * n + t) * row);
    return y;
  };
  test::upload(q, rows_of(p.q, kH * kD));
  test::upload(k, rows_of(p.k, kHkv * kD));
  test::upload(v, rows_of(p.v, kHkv * kD));
  test::upload(dout, rows_of(p.dout, kH * kD));
  for (const Tensor& t : {out, lse, dq, dk, dv}) fill(t, std::nanf(""));  // poison
  test::ScopedEnv env("RT_ATTN_WORK_LIST", list_env);
  RingAttention attn(ring, Layout::contiguous, /*causal=*/true, {kB, n, kH, kHkv, kD, DType::f32}, arena, DType::f32,
                     /*gather=*/true);
  env.restore();
  attn.set_gather_fwd_one_launch(1);
  attn.set_gather_bwd_one_launch(1);
  attn.set_documents(ring_pos.data(), ring_start.data(), nullptr, nullptr, CpScheme::gather);
  attn.forward(q, k, v, out, lse);
  attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
  o.bwd_one_launch = attn.gather_bwd_one_launch();
  o.bwd_work_list = attn.gather_bwd_work_list();
  o.fwd_work_list = attn.gather_fwd_work_list();
  const Tensor outs[test::kNumQuantities] = {out, lse, dq, dk, dv};
  const int64_t rows[test::kNumQuantities] = {kH * kD, kH, kH * kD, kHkv * kD, kHkv * kD};
  const std::vector<double>* want[test::kNumQuantities] = {&ref.out, &ref.lse, &ref.dq, &ref.dk, &ref.dv};
  for (int qn = 0; qn < test::kNumQuantities; ++qn) {
    o.got[qn] = test::download(outs[qn]);
    for (int64_t b = 0; b < kB; ++b) {  // per sample: the rank's positions differ between samples
      const std::vector<int64_t> pos(mine.begin() + b * n, mine.begin() + (b + 1) * n);
      const bool token_major = qn != test::kLse;
      const int64_t per_sample = token_major ? n * rows[qn] : kH * n;
      const std::vector<float> one(o.got[qn].begin() + b * per_sample, o.got[qn].begin() + (b + 1) * per_sample);
      const int64_t ref_per_sample = token_major ? T * rows[qn] : kH * T;
      const std::vector<double> ref_one(want[qn]->begin() + b * ref_per_sample,
                                        want[qn]->begin() + (b + 1) * ref_per_sample);
      test::accumulate(err[qn], one, ref_one, 1, T, rows[qn], pos, token_major);
    }
  }
  return o;
}

TEST(RingGatherWorkList, BackwardOverTheListMatchesOneRankAndTheTwoSourceCall) {
  const int64_t T = 1200;
  const test::AttentionProblem p = test::make_attention_problem(4243, kB, T, kH, kHkv, kD, false);
  std::vector<std::vector<int64_t>> nat_start;  // [b] (T) natural order
  for (int64_t b = 0; b < kB; ++b) nat_start.push_back(document_starts(T, kMix[size_t(b)]));
  const test::AttentionReference ref = test::document_attention_reference(p, nat_start);
  for (int cp = 2; cp <= std::min(4, world_size()); cp += 2) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> orders;
    orders.push_back({"contiguous", layout_order(Layout::contiguous, T, cp)});
    orders.push_back({"zigzag", layout_order(Layout::zigzag, T, cp)});
    orders.push_back({"random unsorted", random_order(T, cp, 91 + uint64_t(cp), /*sorted=*/false)});
    for (const auto& [name, order] : orders) {
      const std::string what = "gather, backward over the work list, " + name + " cp=" + std::to_string(cp);
      test::ErrSum err[test::kNumQuantities], unused[test::kNumQuantities];
      const GatherOutputs with = run_gather(p, ref, order, nat_start, cp, "1", err);
      const GatherOutputs without = run_gather(p, ref, order, nat_start, cp, "0", unused);
      double bad = 0;
      const test::RelErrors rel = test::reduce_errors(err, &bad);
      EXPECT_EQ(bad, 0) << "non-finite outputs: " << what;
      for (int i = 0; i < test::kNumQuantities; ++i)
        EXPECT_LT(rel[size_t(i)], kTolerance) << test::kQuantityNames[i] << " " << what;
      if (world_rank() == 0)
        std::printf("  %s rel err: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e\n", what.c_str(), rel[0], rel[1], rel[2],
                    rel[3], rel[4]);
      int differ = 0;  // quantities of this rank whose bits differ from the ring without the lists
      for (int i = 0; i < test::kNumQuantities; ++i)
        if (with.got[i].size() != without.got[i].size() ||
            std::memcmp(with.got[i].data(), without.got[i].data(), with.got[i].size() * sizeof(float)) != 0) {
          ++differ;
          ADD_FAILURE() << what << ": rank " << world_rank() << "'s " << test::kQuantityNames[i]
                        << " differs from the ring without the work lists";
        }
      int on[4] = {with.bwd_one_launch, with.bwd_work_list, without.bwd_work_list || without.fwd_work_list, differ};
      MPI_Allreduce(MPI_IN_PLACE, on, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_GT(on[1], 0) << what << ": no rank ran its backward over the work list";
      EXPECT_EQ(on[0], on[1]) << what << ": a rank ran its one-launch backward without the work list";
      EXPECT_EQ(on[2], 0) << what << ": a ring built with RT_ATTN_WORK_LIST=0 ran a list";
    }
  }
}

// RT_ATTN_WORK_LIST unset: the lists run (forward and, on these CPU ranks, backward), with the bits of
// RT_ATTN_WORK_LIST=1; a value other than 0 and 1 is refused, naming both and the default.
TEST(RingGatherWorkList, TheListsAreTheDefault) {
  const int64_t T = 1200;
  const test::AttentionProblem p = test::make_attention_problem(4244, kB, T, kH, kHkv, kD, false);
  std::vector<std::vector<int64_t>> nat_start;  // [b] (T) natural order
  for (int64_t b = 0; b < kB; ++b) nat_start.push_back(document_starts(T, kMix[size_t(b)]));
  const test::AttentionReference ref = test::document_attention_reference(p, nat_start);
  const int cp = std::min(4, world_size());
  if (cp < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string what = "gather, RT_ATTN_WORK_LIST unset, zigzag cp=" + std::to_string(cp);
  const std::vector<int64_t> order = layout_order(Layout::zigzag, T, cp);
  test::ErrSum err[test::kNumQuantities], unused[test::kNumQuantities];
  const GatherOutputs unset = run_gather(p, ref, order, nat_start, cp, nullptr, err);
  const GatherOutputs forced = run_gather(p, ref, order, nat_start, cp, "1", unused);
  double bad = 0;
  const test::RelErrors rel = test::reduce_errors(err, &bad);
  EXPECT_EQ(bad, 0) << "non-finite outputs: " << what;
  for (int i = 0; i < test::kNumQuantities; ++i) EXPECT_LT(rel[size_t(i)], kTolerance) << test::kQuantityNames[i];
  for (int i = 0; i < test::kNumQuantities; ++i)
    EXPECT_TRUE(unset.got[i].size() == forced.got[i].size() &&
                (unset.got[i].empty() ||  // a rank outside the ring
                 std::memcmp(unset.got[i].data(), forced.got[i].data(), unset.got[i].size() * sizeof(float)) == 0))
        << what << ": rank " << world_rank() << "'s " << test::kQuantityNames[i] << " differs from RT_ATTN_WORK_LIST=1";
  // Ranks whose forward / backward ran in one launch (set_gather_*_one_launch(1): those that receive rows), and
  // those of them that ran it over a list.
  int on[3] = {unset.bwd_one_launch, unset.fwd_work_list, unset.bwd_work_list};
  MPI_Allreduce(MPI_IN_PLACE, on, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GT(on[0], 0) << what << ": no rank ran its backward in one launch";
  EXPECT_EQ(on[1], on[0]) << what << ": a rank ran its one-launch forward without the work list";
  EXPECT_EQ(on[2], on[0]) << what << ": a rank ran its one-launch backward without the work list";

  for (const char* value : {"2", "", "on"}) {
    test::ScopedEnv env("RT_ATTN_WORK_LIST", value);
    try {
      gather_work_list_from_env();
      ADD_FAILURE() << "RT_ATTN_WORK_LIST=" << value << " was taken";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("RT_ATTN_WORK_LIST=") + value + " is not 1"), std::string::npos) << m;
      EXPECT_NE(m.find("default"), std::string::npos) << m;
      EXPECT_NE(m.find("or 0"), std::string::npos) << m;
    }
  }
  {
    test::ScopedEnv env("RT_ATTN_WORK_LIST", nullptr);
    EXPECT_TRUE(gather_work_list_from_env());
  }
  {
    test::ScopedEnv env("RT_ATTN_WORK_LIST", "0");
    EXPECT_FALSE(gather_work_list_from_env());
  }
}

}  // namespace
