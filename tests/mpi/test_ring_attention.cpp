// Ring attention on real ranks against an fp64 single-rank reference, after un-permuting: O, LSE, dQ, dK, dV
// for cp in {1, 2, 3, 4} (sub-rings of the world; idle ranks wait), every layout, causal and not, GQA.
// The error must not grow with cp: err(cp) <= 2 * err(cp = 1) + kSlack.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/mpi_comm.h"
#include "parallel/ring_attention.h"

using namespace rt;

namespace {

constexpr double kTolerance = 2e-5;  // relative L2 error vs the fp64 reference (f32 compute)
constexpr double kSlack = 2e-6;      // absolute slack on the "does not grow with cp" check

struct Problem {
  int64_t B = 2, T = 24, H = 4, Hkv = 2, D = 8;  // T divisible by 2*cp for cp = 1..4
  std::vector<float> q, k, v, dout;              // (B,T,H,D), (B,T,Hkv,D) x2, (B,T,H,D)
};

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;  // (B,T,H,D), (B,H,T), (B,T,H,D), (B,T,Hkv,D) x2
};

Problem make_problem(uint64_t seed, int64_t T) {
  Problem p;
  p.T = T;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& e : x) e = normal(rng);
  };
  fill(p.q, p.B * p.T * p.H * p.D);
  fill(p.k, p.B * p.T * p.Hkv * p.D);
  fill(p.v, p.B * p.T * p.Hkv * p.D);
  fill(p.dout, p.B * p.T * p.H * p.D);
  return p;
}

// Naive fp64 attention forward and backward on the whole sequence.
Reference reference(const Problem& p, bool causal) {
  const int64_t B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  Reference r;
  r.out.assign(size_t(B * T * H * D), 0.0);
  r.lse.assign(size_t(B * H * T), 0.0);
  r.dq.assign(size_t(B * T * H * D), 0.0);
  r.dk.assign(size_t(B * T * Hkv * D), 0.0);
  r.dv.assign(size_t(B * T * Hkv * D), 0.0);
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h) * D; };
  auto ki = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * Hkv + h) * D; };
  std::vector<double> P(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t nj = causal ? i + 1 : T;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < nj; ++j) {
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += double(p.q[size_t(qi(b, i, h) + e)]) * p.k[size_t(ki(b, j, hk) + e)];
          P[size_t(j)] = s * scale;
          mx = std::max(mx, P[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < nj; ++j) sum += std::exp(P[size_t(j)] - mx);
        const double lse = mx + std::log(sum);
        r.lse[size_t((b * H + h) * T + i)] = lse;
        for (int64_t j = 0; j < nj; ++j) P[size_t(j)] = std::exp(P[size_t(j)] - lse);
        double delta = 0;
        for (int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (int64_t j = 0; j < nj; ++j) o += P[size_t(j)] * p.v[size_t(ki(b, j, hk) + e)];
          r.out[size_t(qi(b, i, h) + e)] = o;
          delta += o * p.dout[size_t(qi(b, i, h) + e)];
        }
        for (int64_t j = 0; j < nj; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < D; ++e) dp += double(p.dout[size_t(qi(b, i, h) + e)]) * p.v[size_t(ki(b, j, hk) + e)];
          const double ds = P[size_t(j)] * (dp - delta) * scale;
          for (int64_t e = 0; e < D; ++e) {
            r.dv[size_t(ki(b, j, hk) + e)] += P[size_t(j)] * p.dout[size_t(qi(b, i, h) + e)];
            r.dq[size_t(qi(b, i, h) + e)] += ds * p.k[size_t(ki(b, j, hk) + e)];
            r.dk[size_t(ki(b, j, hk) + e)] += ds * p.q[size_t(qi(b, i, h) + e)];
          }
        }
      }
    }
  return r;
}

// Rows of a (B, T, heads, D) array at the given global positions: (B, n, heads, D).
std::vector<float> gather_tokens(const std::vector<float>& x, int64_t B, int64_t T, int64_t row,
                                 const std::vector<int64_t>& pos) {
  const int64_t n = int64_t(pos.size());
  std::vector<float> out(size_t(B * n * row));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < row; ++e)
        out[size_t((b * n + t) * row + e)] = x[size_t((b * T + pos[size_t(t)]) * row + e)];
  return out;
}

// Accumulates ||got - want||^2 and ||want||^2 over (B, n, row) rows mapped to global token positions, and
// counts non-finite values. `token_major`: (B, n, row); otherwise (B, heads, n) with row = heads (LSE).
struct ErrSum {
  double diff2 = 0, ref2 = 0, bad = 0;
};
void accumulate(ErrSum& e, const float* got, const std::vector<double>& want, int64_t B, int64_t T, int64_t row,
                const std::vector<int64_t>& pos, bool token_major) {
  const int64_t n = int64_t(pos.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < row; ++c) {
        const double g = token_major ? got[(b * n + t) * row + c] : got[(b * row + c) * n + t];
        const double w = token_major ? want[size_t((b * T + pos[size_t(t)]) * row + c)]
                                     : want[size_t((b * row + c) * T + pos[size_t(t)])];
        if (!std::isfinite(g)) e.bad += 1;
        e.diff2 += (g - w) * (g - w);
        e.ref2 += w * w;
      }
}

enum Quantity { kOut, kLse, kDq, kDk, kDv, kNumQuantities };
const char* kNames[] = {"O", "LSE", "dQ", "dK", "dV"};

// Runs ring attention on a ring of `cp` ranks (world ranks [0, cp); the others only join the reduction)
// and returns the global relative error per quantity.
std::array<double, kNumQuantities> run_ring(const Problem& p, const Reference& ref, int cp, Layout layout, bool causal,
                                            double* bad_total) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const bool member = world_rank < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &sub);
  ErrSum err[kNumQuantities];
  if (member) {
    MpiComm ring(sub, /*owned=*/true);
    const int r = ring.rank();
    const std::vector<int64_t> pos = layout_positions(layout, p.T, cp, r);
    const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
    std::vector<float> q = gather_tokens(p.q, B, p.T, H * D, pos), k = gather_tokens(p.k, B, p.T, Hkv * D, pos),
                       v = gather_tokens(p.v, B, p.T, Hkv * D, pos), dout = gather_tokens(p.dout, B, p.T, H * D, pos);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(q.size(), nan), lse(size_t(B * H * n), nan), dq(q.size(), nan), dk(k.size(), nan),
        dv(v.size(), nan);
    auto T4 = [&](std::vector<float>& x, int64_t heads) {
      return Tensor(x.data(), DType::f32, Device::cpu(), {B, n, heads, D});
    };
    Arena arena(Device::cpu(), size_t(4) << 20);
    RingAttention attn(ring, layout, causal, {B, n, H, Hkv, D, DType::f32}, arena);
    Tensor lse_t(lse.data(), DType::f32, Device::cpu(), {B, H, n});
    attn.forward(T4(q, H), T4(k, Hkv), T4(v, Hkv), T4(out, H), lse_t);
    attn.backward(T4(q, H), T4(k, Hkv), T4(v, Hkv), T4(out, H), T4(dout, H), lse_t, T4(dq, H), T4(dk, Hkv),
                  T4(dv, Hkv));
    accumulate(err[kOut], out.data(), ref.out, B, p.T, H * D, pos, true);
    accumulate(err[kLse], lse.data(), ref.lse, B, p.T, H, pos, false);
    accumulate(err[kDq], dq.data(), ref.dq, B, p.T, H * D, pos, true);
    accumulate(err[kDk], dk.data(), ref.dk, B, p.T, Hkv * D, pos, true);
    accumulate(err[kDv], dv.data(), ref.dv, B, p.T, Hkv * D, pos, true);
  }
  double sums[3 * kNumQuantities];
  for (int i = 0; i < kNumQuantities; ++i) {
    sums[3 * i] = err[i].diff2;
    sums[3 * i + 1] = err[i].ref2;
    sums[3 * i + 2] = err[i].bad;
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 3 * kNumQuantities, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  std::array<double, kNumQuantities> rel{};
  *bad_total = 0;
  for (int i = 0; i < kNumQuantities; ++i) {
    rel[size_t(i)] = std::sqrt(sums[3 * i] / sums[3 * i + 1]);
    *bad_total += sums[3 * i + 2];
  }
  return rel;
}

int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

}  // namespace

class RingAttentionSweep : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(RingAttentionSweep, MatchesSingleRankReferenceForEveryCp) {
  const auto [layout, causal] = GetParam();
  // 24 tokens: a handful per rank; 120 tokens: blocks span several kernel tiles.
  for (int64_t T : {24, 120}) {
    const Problem p = make_problem(1234 + uint64_t(layout) * 10 + uint64_t(causal) + uint64_t(T), T);
    const Reference ref = reference(p, causal);
    std::array<double, kNumQuantities> base{};
    for (int cp = 1; cp <= std::min(4, world_size()); ++cp) {
      double bad = 0;
      const auto rel = run_ring(p, ref, cp, layout, causal, &bad);
      EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
      if (cp == 1) base = rel;
      int world_rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      if (world_rank == 0)
        std::printf("  T=%d %s %s cp=%d rel err: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e\n", int(T),
                    layout_name(layout), causal ? "causal" : "full", cp, rel[0], rel[1], rel[2], rel[3], rel[4]);
      for (int i = 0; i < kNumQuantities; ++i) {
        EXPECT_LT(rel[size_t(i)], kTolerance) << kNames[i] << " cp=" << cp;
        EXPECT_LE(rel[size_t(i)], 2 * base[size_t(i)] + kSlack) << kNames[i] << " error grows with cp: cp=" << cp << " "
                                                                << rel[size_t(i)] << " vs cp=1 " << base[size_t(i)];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingAttentionSweep,
                         ::testing::Combine(::testing::Values(Layout::contiguous, Layout::zigzag, Layout::striped),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(layout_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_causal" : "_full");
                         });

// The ring's sizes are checked up front with messages that name the fix.
TEST(RingAttention, RejectsBadShapes) {
  LocalComm local;
  Arena arena = Arena::measuring(Device::cpu());
  EXPECT_THROW(RingAttention(local, Layout::zigzag, true, {1, 7, 4, 2, 8, DType::f32}, arena), Error);
  EXPECT_THROW(RingAttention(local, Layout::contiguous, true, {1, 8, 4, 3, 8, DType::f32}, arena), Error);
  RingAttention ok(local, Layout::zigzag, true, {1, 8, 4, 2, 8, DType::f32}, arena);
  std::vector<float> x(1024, 1.f);
  Tensor bad(x.data(), DType::f32, Device::cpu(), {1, 8, 4, 4});
  Tensor lse(x.data(), DType::f32, Device::cpu(), {1, 4, 8});
  EXPECT_THROW(ok.forward(bad, bad, bad, bad, lse), Error);
}

// The ring order is fixed, so a second call on the same object (as every layer reuses it) is bitwise equal.
TEST(RingAttention, ReusedObjectIsBitwiseDeterministic) {
  auto world = make_mpi_world_comm();
  const int64_t B = 1, n = 16, H = 4, Hkv = 1, D = 8;
  std::mt19937 rng(99 + unsigned(world->rank()));
  std::normal_distribution<float> normal;
  std::vector<float> q(size_t(B * n * H * D)), k(size_t(B * n * Hkv * D)), v(k.size()), dout(q.size());
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = normal(rng);
  Arena arena(Device::cpu(), size_t(1) << 20);
  RingAttention attn(*world, Layout::zigzag, true, {B, n, H, Hkv, D, DType::f32}, arena);
  auto t4 = [&](std::vector<float>& x, int64_t heads) {
    return Tensor(x.data(), DType::f32, Device::cpu(), {B, n, heads, D});
  };
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(q.size(), nan), lse(size_t(B * H * n), nan), dq(q.size(), nan), dk(k.size(), nan),
        dv(v.size(), nan);
    Tensor lse_t(lse.data(), DType::f32, Device::cpu(), {B, H, n});
    attn.forward(t4(q, H), t4(k, Hkv), t4(v, Hkv), t4(out, H), lse_t);
    attn.backward(t4(q, H), t4(k, Hkv), t4(v, Hkv), t4(out, H), t4(dout, H), lse_t, t4(dq, H), t4(dk, Hkv),
                  t4(dv, Hkv));
    for (auto* x : {&out, &lse, &dq, &dk, &dv}) results[run].insert(results[run].end(), x->begin(), x->end());
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_TRUE(std::isfinite(results[0][i])) << "index " << i;
    ASSERT_EQ(std::memcmp(&results[0][i], &results[1][i], sizeof(float)), 0) << "index " << i;
  }
}
