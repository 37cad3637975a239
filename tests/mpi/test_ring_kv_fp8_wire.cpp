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
//   - The gather scheme refuses e4m3 (it exchanges K/V rows in the activation dtype).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"

using namespace rt;

namespace {

constexpr int64_t kB = 2, kT = 1024, kH = 4, kHkv = 2, kD = 64;

// How a ring runs: K/V on the wire in e4m3 or as they are; the FP8 backward (fp8.attention) on or off.
struct WireMode {
  bool e4m3 = false;
  bool fp8_backward = false;
};

// One rank's outputs (B, n, ...) in its layout order, and what its ring moved.
struct RankRun {
  std::vector<float> out, lse, dq, dk, dv;  // (B,n,H,D), (B,H,n), (B,n,H,D), (B,n,Hkv,D) x2
  double fwd_sent = 0, bwd_sent = 0;        // this rank's bytes of the forward call and of the backward call
  double planned = 0, full = 0;             // planned_bytes_per_layer, ring_bytes_per_layer (over all ranks)
};

// Forward and backward of `p` on `ring` (its rank's layout positions), outputs poisoned with NaN before the calls.
RankRun run_rank(Comm& ring, const test::AttentionProblem& p, Layout layout, WireMode mode) {
  const std::vector<int64_t> pos = layout_positions(layout, p.T, ring.size(), ring.rank());
  const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
  Arena arena(Device::cpu(), size_t(96) << 20);
  Tensor q = arena.alloc(DType::f32, {B, n, H, D}, "q");          // (B, n, H, D)
  Tensor k = arena.alloc(DType::f32, {B, n, Hkv, D}, "k");        // (B, n, Hkv, D)
  Tensor v = arena.alloc(DType::f32, {B, n, Hkv, D}, "v");        // (B, n, Hkv, D)
  Tensor dout = arena.alloc(DType::f32, {B, n, H, D}, "do");      // (B, n, H, D)
  Tensor out = arena.alloc(DType::f32, {B, n, H, D}, "o");        // (B, n, H, D)
  Tensor lse = arena.alloc(DType::f32, {B, H, n}, "lse");         // (B, H, n)
  Tensor dq = arena.alloc(DType::f32, {B, n, H, D}, "dq");        // (B, n, H, D)
  Tensor dk = arena.alloc(DType::f32, {B, n, Hkv, D}, "dk");      // (B, n, Hkv, D)
  Tensor dv = arena.alloc(DType::f32, {B, n, Hkv, D}, "dv");      // (B, n, Hkv, D)
  test::upload(q, test::gather_tokens(p.q, B, p.T, H * D, pos));
  test::upload(k, test::gather_tokens(p.k, B, p.T, Hkv * D, pos));
  test::upload(v, test::gather_tokens(p.v, B, p.T, Hkv * D, pos));
  test::upload(dout, test::gather_tokens(p.dout, B, p.T, H * D, pos));
  for (const Tensor& t : {out, lse, dq, dk, dv}) fill(t, std::nanf(""));  // poison
  RingAttention attn(ring, layout, /*causal=*/true, {B, n, H, Hkv, D, DType::f32}, arena);
  attn.set_fp8_backward(mode.fp8_backward);
  if (mode.e4m3) attn.set_kv_wire(DType::e4m3, arena);
  EXPECT_EQ(attn.kv_wire(), mode.e4m3 ? DType::e4m3 : DType::f32);
  RankRun r;
  attn.forward(q, k, v, out, lse);
  r.fwd_sent = attn.last_call_timings().sent_bytes;
  attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
  r.bwd_sent = attn.last_call_timings().sent_bytes;
  r.planned = attn.planned_bytes_per_layer(), r.full = attn.ring_bytes_per_layer();
  r.out = test::download(out), r.lse = test::download(lse), r.dq = test::download(dq);
  r.dk = test::download(dk), r.dv = test::download(dv);
  return r;
}

// The one-rank call (cp = 1, every rank computes it alone) as the reference the ring is compared with.
test::AttentionReference one_rank(const test::AttentionProblem& p, WireMode mode) {
  MPI_Comm self = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  MpiComm comm(self, /*owned=*/true);
  const RankRun r = run_rank(comm, p, Layout::contiguous, mode);
  test::AttentionReference ref;
  ref.out.assign(r.out.begin(), r.out.end());
  ref.lse.assign(r.lse.begin(), r.lse.end());
  ref.dq.assign(r.dq.begin(), r.dq.end());
  ref.dk.assign(r.dk.begin(), r.dk.end());
  ref.dv.assign(r.dv.begin(), r.dv.end());
  return ref;
}

// What a ring of cp ranks did, over all its ranks.
struct RingResult {
  test::RelErrors rel{};  // against the reference
  double bad = 0;         // non-finite outputs
  double fwd_sent = 0, bwd_sent = 0, planned = 0, full = 0;  // bytes summed over the ring's ranks (planned, full:
                                                             // the planner's, already over all ranks)
};

// The ring on world ranks [0, cp) (the others only join the reductions), compared with `ref`.
RingResult run_ring(const test::AttentionProblem& p, const test::AttentionReference& ref, int cp, Layout layout,
                    WireMode mode) {
  const bool member = test::world_rank() < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, test::world_rank(), &sub);
  test::ErrSum err[test::kNumQuantities];
  double bytes[4] = {0, 0, 0, 0};  // fwd_sent, bwd_sent (summed), planned, full (rank 0's)
  if (member) {
    MpiComm ring(sub, /*owned=*/true);
    const RankRun r = run_rank(ring, p, layout, mode);
    const std::vector<int64_t> pos = layout_positions(layout, p.T, cp, ring.rank());
    test::accumulate(err[test::kOut], r.out, ref.out, p.B, p.T, p.H * p.D, pos, true);
    test::accumulate(err[test::kLse], r.lse, ref.lse, p.B, p.T, p.H, pos, false);
    test::accumulate(err[test::kDq], r.dq, ref.dq, p.B, p.T, p.H * p.D, pos, true);
    test::accumulate(err[test::kDk], r.dk, ref.dk, p.B, p.T, p.Hkv * p.D, pos, true);
    test::accumulate(err[test::kDv], r.dv, ref.dv, p.B, p.T, p.Hkv * p.D, pos, true);
    bytes[0] = r.fwd_sent, bytes[1] = r.bwd_sent;
    if (ring.rank() == 0) bytes[2] = r.planned, bytes[3] = r.full;
  }
  MPI_Allreduce(MPI_IN_PLACE, bytes, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  RingResult res;
  res.rel = test::reduce_errors(err, &res.bad);
  res.fwd_sent = bytes[0], res.bwd_sent = bytes[1], res.planned = bytes[2], res.full = bytes[3];
  return res;
}

struct Grid {
  Layout layout;
  int cp;
};
// Every grid's 128-row blocks are the one-rank call's: contiguous shards of 512 and 256 rows, zigzag chunks of 256
// and 128.
const Grid kGrids[] = {{Layout::contiguous, 2}, {Layout::contiguous, 4}, {Layout::zigzag, 2}, {Layout::zigzag, 4}};

}  // namespace

// The forward and the bf16 backward (fp8.attention off), so the only rounding is the wire's: the ring against one
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
