// fp8.attention_kv: e4m3 on rings of CPU ranks (RingAttention::set_kv_wire, kernels/kv_fp8_wire.h; issue 47
// "Communication"): every rank rounds its own K and V to E4M3 (a factor per sample, 128-row block and K/V head) and
// the ring's K/V hops carry the codes and factors.
//   - The ring equals one rank running the same rounding, up to f32 reassociation, where every rank's 128-row
//     blocks hold the tokens of the one-rank call's blocks (contiguous shards and zigzag chunks multiples of 128):
//     the rounding is part of the function, not of the grid. With the FP8 backward on (fp8.attention, the config
//     that allows the key) to its grid tolerance, as tests/mpi/test_ring_attention_fp8.cpp.
//   - It differs from the ring that sends K/V as they are (the activation dtype, f32 on CPU ranks) by E4M3's rounding
//     of K and V: more than 1e-3 relative (the rounding happened) and less than 5e-2 (nothing else did).
//   - The bytes: the K/V hops of a call move 0.5 (+- 0.01) x what bf16 K/V would (0.25 x the f32 block the CPU
//     ring sends otherwise), the dK/dV hops what they did; sent bytes equal planned_bytes_per_layer, the full
//     ring's equal ring_bytes_per_layer.
//   - Packed documents on the ring scheme (skipped hops skip their messages): the ring still equals one rank.
//   - The gather scheme refuses e4m3 (it exchanges K/V rows in the activation dtype).
//   - Training (tests/mpi/fp8_grid_run.h's block-recipe model shape, head dim 64, 128 tokens per rank at cp 2, run with
//     the tensorwise recipe, whose amaxes are reduced over the ranks, + fp8.attention + attention_kv e4m3): 3 steps on
//     cp 2 equal one rank within the FP8 grids' tolerances (measured 6e-7 worst gradient), and the step-1 gradients
//     differ from the same ring with bf16 K/V by more than 5x those tolerances (measured 7.4e-2). (The block recipe's
//     own grid noise, ~3e-2 here, would hide the difference.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/cp/ring_attention.h"
#include "tests/mpi/fp8_grid_run.h"
#include "tests/mpi/kv_fp8_wire_run.h"
#include "tests/mpi/mpi_world.h"

using namespace rt;
using rt::test::kvwire::RingResult;
using rt::test::kvwire::WireMode;

namespace {

constexpr int64_t kB = 2, kT = 1024, kH = 4, kHkv = 2, kD = 64;

// f32 tensors on CPU ranks, the mpi communicator.
RingResult run_ring(const test::AttentionProblem& p, const test::AttentionReference& ref, int cp, Layout layout,
                    WireMode mode) {
  return test::kvwire::run_ring(p, ref, cp, layout, mode, {});
}
test::AttentionReference one_rank(const test::AttentionProblem& p, WireMode mode) {
  return test::kvwire::one_rank(p, mode, {});
}

struct Grid {
  Layout layout;
  int cp;
};
// Every grid's 128-row blocks are the one-rank call's: contiguous shards of 512 and 256 rows, zigzag chunks of 256
// and 128.
const Grid kGrids[] = {{Layout::contiguous, 2}, {Layout::contiguous, 4}, {Layout::zigzag, 2}, {Layout::zigzag, 4}};

}  // namespace

// The forward and the f32 backward (fp8.attention off), so the only rounding is the wire's: the ring against one
// rank with the same rounding within f32 reassociation (~1e-6), against the wire as it is by E4M3's rounding.
TEST(RingKvFp8Wire, RingEqualsOneRankAndDiffersFromTheActivationWireByTheRounding) {
  const test::AttentionProblem p = test::make_attention_problem(9101, kB, kT, kH, kHkv, kD, /*round_to_bf16=*/false);
  const test::AttentionReference e4m3_one = one_rank(p, {true, false});
  const test::AttentionReference plain_one = one_rank(p, {false, false});
  for (const Grid g : kGrids) {
    if (g.cp > test::world_size()) continue;
    const RingResult same = run_ring(p, e4m3_one, g.cp, g.layout, {true, false});
    const RingResult apart = run_ring(p, plain_one, g.cp, g.layout, {true, false});
    if (test::world_rank() == 0)
      std::printf("  %s cp=%d e4m3 wire: against one e4m3 rank O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e; against the "
                  "f32 wire's one rank O %.2e dQ %.2e dK %.2e dV %.2e\n",
                  layout_name(g.layout), g.cp, same.rel[test::kOut], same.rel[test::kLse], same.rel[test::kDq],
                  same.rel[test::kDk], same.rel[test::kDv], apart.rel[test::kOut], apart.rel[test::kDq],
                  apart.rel[test::kDk], apart.rel[test::kDv]);
    EXPECT_EQ(same.bad, 0) << "non-finite outputs";
    for (int i = 0; i < test::kNumQuantities; ++i)
      EXPECT_LT(same.rel[size_t(i)], 1e-5)
          << test::kQuantityNames[i] << " " << layout_name(g.layout) << " cp=" << g.cp << ": not the one-rank rounding";
    for (int i : {test::kOut, test::kDq, test::kDk, test::kDv}) {
      EXPECT_GT(apart.rel[size_t(i)], 1e-3) << test::kQuantityNames[i] << ": K/V were not rounded";
      EXPECT_LT(apart.rel[size_t(i)], 5e-2) << test::kQuantityNames[i] << ": more than E4M3's rounding of K and V";
    }
  }
}

// The config that allows the key: fp8.attention's FP8 backward on the rounded K/V, ring against one rank.
TEST(RingKvFp8Wire, WithTheFp8BackwardTheRingEqualsOneRank) {
  const test::AttentionProblem p = test::make_attention_problem(9102, kB, kT, kH, kHkv, kD, /*round_to_bf16=*/false);
  const test::AttentionReference e4m3_one = one_rank(p, {true, true});
  for (const Grid g : kGrids) {
    if (g.cp > test::world_size()) continue;
    const RingResult r = run_ring(p, e4m3_one, g.cp, g.layout, {true, true});
    if (test::world_rank() == 0)
      std::printf("  %s cp=%d e4m3 wire + FP8 backward against one rank: O %.2e dQ %.2e dK %.2e dV %.2e\n",
                  layout_name(g.layout), g.cp, r.rel[test::kOut], r.rel[test::kDq], r.rel[test::kDk],
                  r.rel[test::kDv]);
    EXPECT_EQ(r.bad, 0) << "non-finite outputs";
    EXPECT_LT(r.rel[test::kOut], 1e-5);
    for (int i : {test::kDq, test::kDk, test::kDv})  // the FP8 backward's grid tolerance (codes flip at ties)
      EXPECT_LT(r.rel[size_t(i)], 5e-4) << test::kQuantityNames[i] << " " << layout_name(g.layout) << " cp=" << g.cp;
  }
}

// The bytes of one layer (forward + backward) with K/V as E4M3 messages against the f32 K/V of a CPU ring.
TEST(RingKvFp8Wire, KvHopsMoveHalfOfBf16AndThePlannerCountsThem) {
  const test::AttentionProblem p = test::make_attention_problem(9103, kB, kT, kH, kHkv, kD, /*round_to_bf16=*/false);
  const test::AttentionReference any = one_rank(p, {false, false});  // errors unused here
  for (const Grid g : kGrids) {
    if (g.cp > test::world_size()) continue;
    const RingResult plain = run_ring(p, any, g.cp, g.layout, {false, false});
    const RingResult e4m3 = run_ring(p, any, g.cp, g.layout, {true, false});
    const int64_t n = kT / g.cp;
    const double hops = double(g.cp) * (g.cp - 1);                 // K/V hops of one call over all ranks
    const double f32_block = 2.0 * kB * n * kHkv * kD * 4.0;       // one K|V block in f32
    const double bf16_kv = hops * f32_block / 2.0;                 // what bf16 K/V would move in one call
    const double dkv = hops * f32_block;                           // the f32 dK|dV accumulator's hops (dkv_wire f32)
    if (test::world_rank() == 0)
      std::printf("  %s cp=%d: forward K/V %.0f bytes e4m3 vs %.0f f32 (%.4f x bf16); backward %.0f vs %.0f; "
                  "planned %.0f (sent %.0f), full ring %.0f\n",
                  layout_name(g.layout), g.cp, e4m3.fwd_sent, plain.fwd_sent, e4m3.fwd_sent / bf16_kv,
                  e4m3.bwd_sent, plain.bwd_sent, e4m3.planned, e4m3.fwd_sent + e4m3.bwd_sent, e4m3.full);
    EXPECT_DOUBLE_EQ(plain.fwd_sent, 2 * bf16_kv) << "the f32 ring's K/V hops";
    EXPECT_NEAR(e4m3.fwd_sent / bf16_kv, 0.5, 0.01) << "the forward's K/V hops";
    EXPECT_NEAR((e4m3.bwd_sent - dkv) / bf16_kv, 0.5, 0.01) << "the backward's K/V hops";
    EXPECT_GT(e4m3.fwd_sent / bf16_kv, 0.5) << "the factors travel too";
    EXPECT_DOUBLE_EQ(e4m3.bwd_sent - dkv, e4m3.fwd_sent) << "one message per K/V hop in both calls";
    EXPECT_DOUBLE_EQ(plain.bwd_sent - dkv, plain.fwd_sent) << "the dK/dV hops unchanged";
    EXPECT_DOUBLE_EQ(e4m3.planned, e4m3.fwd_sent + e4m3.bwd_sent) << "planned_bytes_per_layer";
    EXPECT_DOUBLE_EQ(e4m3.full, e4m3.planned) << "ring_bytes_per_layer (no documents: every hop)";
    EXPECT_DOUBLE_EQ(plain.planned, plain.fwd_sent + plain.bwd_sent);
  }
}

// Packed documents on the ring scheme (CPU ranks, where fp8.attention takes documents): hops nobody needs are
// skipped (their messages too), the rest carry E4M3; the ring still equals one rank with the same rounding.
TEST(RingKvFp8Wire, RingWithDocumentsEqualsOneRank) {
  const test::AttentionProblem p = test::make_attention_problem(9104, kB, kT, kH, kHkv, kD, /*round_to_bf16=*/false);
  const test::kvwire::DocStarts docs = {test::document_starts(kT, {300, 200, 524}),
                                        test::document_starts(kT, {100, 60, 700, 164})};
  for (const bool fp8_backward : {false, true}) {
    const WireMode mode{true, fp8_backward};
    const test::AttentionReference one = test::kvwire::one_rank(p, mode, {}, &docs);
    for (const Grid g : kGrids) {
      if (g.cp > test::world_size()) continue;
      const RingResult r = test::kvwire::run_ring(p, one, g.cp, g.layout, mode, {}, &docs);
      if (test::world_rank() == 0)
        std::printf("  documents %s cp=%d e4m3%s: against one rank O %.2e dQ %.2e dK %.2e dV %.2e; bytes %.0f of the "
                    "full ring's %.0f\n",
                    layout_name(g.layout), g.cp, fp8_backward ? " + FP8 backward" : "", r.rel[test::kOut],
                    r.rel[test::kDq], r.rel[test::kDk], r.rel[test::kDv], r.fwd_sent + r.bwd_sent, r.full);
      EXPECT_EQ(r.bad, 0) << "non-finite outputs";
      EXPECT_LT(r.rel[test::kOut], 1e-5) << layout_name(g.layout) << " cp=" << g.cp;
      for (int i : {test::kDq, test::kDk, test::kDv})
        EXPECT_LT(r.rel[size_t(i)], fp8_backward ? 5e-4 : 1e-5)
            << test::kQuantityNames[i] << " " << layout_name(g.layout) << " cp=" << g.cp;
      EXPECT_DOUBLE_EQ(r.planned, r.fwd_sent + r.bwd_sent) << "planned_bytes_per_layer";
      EXPECT_LE(r.planned, r.full);
    }
  }
}

// The gather scheme moves K/V rows in the activation dtype: set_documents refuses it with e4m3, naming the fix.
TEST(RingKvFp8Wire, GatherSchemeRefusesE4m3) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::shared_ptr<Comm> ring = test::sub_world(2);
  if (ring) {
    const int64_t n = 128, T = 2 * n;
    Arena arena(Device::cpu(), size_t(32) << 20);
    RingAttention attn(*ring, Layout::contiguous, true, {1, n, kH, kHkv, kD, DType::f32}, arena, DType::f32,
                       /*gather=*/true);
    attn.set_kv_wire(DType::e4m3, arena);
    std::vector<int64_t> pos(static_cast<size_t>(T)), start(static_cast<size_t>(T));  // (1, T): a document per half
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t, start[size_t(t)] = t < n ? 0 : n;
    try {
      attn.set_documents(pos.data(), start.data(), nullptr, nullptr, CpScheme::gather);
      ADD_FAILURE() << "the gather scheme took e4m3 K/V";
    } catch (const std::exception& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("parallel.cp_scheme: ring"), std::string::npos) << m;
      EXPECT_NE(m.find("fp8.attention_kv: bf16"), std::string::npos) << m;
    }
    attn.set_documents(pos.data(), start.data(), nullptr, nullptr, CpScheme::ring);  // the ring scheme takes it
    EXPECT_EQ(attn.scheme(), CpScheme::ring);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The model: fp8.attention_kv reaches the ring (ModelOptions -> RingAttention::set_kv_wire) and the grid trains as one
// rank does. c: the grid (cp, cp_a2a); its model is fp8_grid_run.h's block-recipe shape run with the tensorwise recipe.
namespace {

void expect_training_grid_equals_one_rank(const rt::test::fp8grid::Fp8Case& c) {
  using namespace rt::test::fp8grid;
  const int size = c.dp * c.cp * c.tp;
  if (test::world_size() < size) GTEST_SKIP() << "needs " << size << " ranks";
  auto with_kv = [](Config config, const char* kv) {
    config.fp8.recipe = "tensorwise";  // the amaxes reduced over the ranks: the grid quantizes what one rank does
    config.fp8.attention = true, config.fp8.attention_kv = kv;
    validate_config(config, 0);
    return config;
  };
  std::shared_ptr<Comm> sub = test::sub_world(size);
  if (sub) {
    ProcessGrid grid = ProcessGrid::create(sub, GridDims{c.dp, c.cp, c.tp, c.a2a});
    const int steps = 3;
    const RunResult got = train(with_kv(make_config(c, c.dp, c.cp, c.tp, c.a2a, 0, "fp8"), "e4m3"), grid, steps);
    const RunResult bf16_kv = train(with_kv(make_config(c, c.dp, c.cp, c.tp, c.a2a, 0, "fp8"), "bf16"), grid, steps);
    ProcessGrid one = ProcessGrid::local();
    const RunResult ref = train(with_kv(make_config(c, 1, 1, 1, 1, 0, "fp8"), "e4m3"), one, steps);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    for (double l : got.losses) ASSERT_TRUE(std::isfinite(l));
    const double loss_err = std::abs(got.losses[0] - ref.losses[0]) / std::abs(ref.losses[0]);
    EXPECT_LE(loss_err, kLossRelTol) << "step-1 loss " << got.losses[0] << " vs one rank " << ref.losses[0];
    const double grad_err = worst_grad_error(got.first_grads, ref.first_grads, kGradRelTol);
    double curve_err = 0;
    for (size_t i = 0; i < ref.losses.size(); ++i)
      curve_err = std::max(curve_err, std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]));
    EXPECT_LE(curve_err, kCurveRelTol);
    const double apart = worst_grad_error(got.first_grads, bf16_kv.first_grads, 1.0);
    if (sub->rank() == 0)
      std::printf("[ fp8 kv wire training ] cp %d cp_a2a %d vs one rank: step-1 loss err %.1e, worst grad err %.1e, "
                  "curve err %.1e | vs bf16 K/V on the same grid: worst grad %.2e\n",
                  c.cp, c.a2a, loss_err, grad_err, curve_err, apart);
    EXPECT_GT(apart, 5 * kGradRelTol) << "fp8.attention_kv e4m3 did not reach the ring's K/V";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST(RingKvFp8WireTraining, Cp2EqualsOneRankAndDiffersFromBf16Kv) {
  expect_training_grid_equals_one_rank({"block", 1, 2, 1});
}

// The hybrid: a 2-rank all-to-all (K/V heads in bf16) and a ring of 2 over its 256-row head-sharded shards (E4M3).
TEST(RingKvFp8WireTraining, HybridCp4A2a2EqualsOneRank) {
  expect_training_grid_equals_one_rank({"block", 1, 4, 1, 2});
}
