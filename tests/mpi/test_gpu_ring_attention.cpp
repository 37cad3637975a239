// Ring attention on CUDA tensors, as several ranks sharing the one GPU through the mpi communicator (pinned
// host staging), against an fp64 single-sequence reference after un-permuting: O, LSE, dQ, dK, dV for
// cp in {1, 2, 4}, zigzag causal and contiguous non-causal, GQA, head_dim 64.
// Runs under `mpirun -np 4` (ctest labels mpi;gpu); skips without a CUDA device.
//
// Tolerances: inputs are bf16-rounded so the reference sees what the GPU sees; O, dQ, dK, dV come back in
// bf16 (relative rounding 2^-9 = 2e-3 per element), state and LSE are f32. Measured on cp = 1 ~3e-3.
//   every quantity, every cp:  ||got - ref|| / ||ref|| <= 1.5e-2
//   the ring adds no error:   err(cp) <= 1.5 * err(cp = 1) + 2e-3   (the single-rank GPU result)
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/arena.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/mpi_comm.h"
#include "parallel/ring_attention.h"

using namespace rt;

namespace {

constexpr double kTolerance = 1.5e-2;
constexpr double kGrowth = 1.5, kSlack = 2e-3;

struct Problem {
  int64_t B = 1, T = 256, H = 4, Hkv = 2, D = 64;  // T divisible by 2*cp for cp = 1, 2, 4
  std::vector<float> q, k, v, dout;                // (B,T,H,D), (B,T,Hkv,D) x2, (B,T,H,D), bf16-rounded
};

Problem make_problem(uint64_t seed) {
  Problem p;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& e : x) e = bf16_to_float(float_to_bf16(normal(rng)));
  };
  fill(p.q, p.B * p.T * p.H * p.D);
  fill(p.k, p.B * p.T * p.Hkv * p.D);
  fill(p.v, p.B * p.T * p.Hkv * p.D);
  fill(p.dout, p.B * p.T * p.H * p.D);
  return p;
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;  // (B,T,H,D), (B,H,T), (B,T,H,D), (B,T,Hkv,D) x2
};

Reference reference(const Problem& p, bool causal) {
  const int64_t B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  Reference r;
  r.out.assign(size_t(B * T * H * D), 0.0);
  r.lse.assign(size_t(B * H * T), 0.0);
  r.dq.assign(size_t(B * T * H * D), 0.0);
  r.dk.assign(size_t(B * T * Hkv * D), 0.0);
  r.dv.assign(size_t(B * T * Hkv * D), 0.0);
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return size_t(((b * T + t) * H + h) * D); };
  auto ki = [&](int64_t b, int64_t t, int64_t h) { return size_t(((b * T + t) * Hkv + h) * D); };
  std::vector<double> P(size_t(T), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t nj = causal ? i + 1 : T;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < nj; ++j) {
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += double(p.q[qi(b, i, h) + e]) * p.k[ki(b, j, hk) + e];
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
          for (int64_t j = 0; j < nj; ++j) o += P[size_t(j)] * p.v[ki(b, j, hk) + e];
          r.out[qi(b, i, h) + e] = o;
          delta += o * p.dout[qi(b, i, h) + e];
        }
        for (int64_t j = 0; j < nj; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < D; ++e) dp += double(p.dout[qi(b, i, h) + e]) * p.v[ki(b, j, hk) + e];
          const double ds = P[size_t(j)] * (dp - delta) * scale;
          for (int64_t e = 0; e < D; ++e) {
            r.dv[ki(b, j, hk) + e] += P[size_t(j)] * p.dout[qi(b, i, h) + e];
            r.dq[qi(b, i, h) + e] += ds * p.k[ki(b, j, hk) + e];
            r.dk[ki(b, j, hk) + e] += ds * p.q[qi(b, i, h) + e];
          }
        }
      }
    }
  return r;
}

// Rows of a (B, T, row) array at the given global positions: (B, n, row).
std::vector<float> gather_tokens(const std::vector<float>& x, int64_t B, int64_t T, int64_t row,
                                 const std::vector<int64_t>& pos) {
  const int64_t n = int64_t(pos.size());
  std::vector<float> out(size_t(B * n * row));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < row; ++e) out[size_t((b * n + t) * row + e)] = x[size_t((b * T + pos[size_t(t)]) * row + e)];
  return out;
}

struct ErrSum {
  double diff2 = 0, ref2 = 0, bad = 0;
};
void accumulate(ErrSum& e, const std::vector<float>& got, const std::vector<double>& want, int64_t B, int64_t T,
                int64_t row, const std::vector<int64_t>& pos, bool token_major) {
  const int64_t n = int64_t(pos.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < row; ++c) {
        const double g = token_major ? got[size_t((b * n + t) * row + c)] : got[size_t((b * row + c) * n + t)];
        const double w = token_major ? want[size_t((b * T + pos[size_t(t)]) * row + c)]
                                     : want[size_t((b * row + c) * T + pos[size_t(t)])];
        if (!std::isfinite(g)) e.bad += 1;
        e.diff2 += (g - w) * (g - w);
        e.ref2 += w * w;
      }
}

enum Quantity { kOut, kLse, kDq, kDk, kDv, kNumQuantities };
const char* kNames[] = {"O", "LSE", "dQ", "dK", "dV"};

// Host f32 values <-> a device tensor of any float dtype.
void upload(const Tensor& dst, std::vector<float> values) {
  copy_cast(dst, Tensor(values.data(), DType::f32, Device::cpu(), {int64_t(values.size())}));
}
std::vector<float> download(const Tensor& src) {
  std::vector<float> out(size_t(src.numel()));
  copy_cast(Tensor(out.data(), DType::f32, Device::cpu(), {src.numel()}), src);
  return out;
}

// One ring of `cp` ranks (world ranks [0, cp)) on the GPU; the others only join the error reduction.
std::array<double, kNumQuantities> run_ring(const Problem& p, const Reference& ref, int cp, Layout layout,
                                            bool causal, double* bad_total) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const bool member = world_rank < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &sub);
  ErrSum err[kNumQuantities];
  if (member) {
    MpiComm ring(sub, /*owned=*/true);
    const Device gpu = Device::cuda(0);
    const std::vector<int64_t> pos = layout_positions(layout, p.T, cp, ring.rank());
    const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
    Arena arena(gpu, size_t(64) << 20);
    Tensor q = arena.alloc(DType::bf16, {B, n, H, D}, "q");      // (B, n, H, D)
    Tensor k = arena.alloc(DType::bf16, {B, n, Hkv, D}, "k");    // (B, n, Hkv, D)
    Tensor v = arena.alloc(DType::bf16, {B, n, Hkv, D}, "v");    // (B, n, Hkv, D)
    Tensor dout = arena.alloc(DType::bf16, {B, n, H, D}, "do");  // (B, n, H, D)
    Tensor out = arena.alloc(DType::bf16, {B, n, H, D}, "o");    // (B, n, H, D)
    Tensor lse = arena.alloc(DType::f32, {B, H, n}, "lse");      // (B, H, n)
    Tensor dq = arena.alloc(DType::bf16, {B, n, H, D}, "dq");    // (B, n, H, D)
    Tensor dk = arena.alloc(DType::bf16, {B, n, Hkv, D}, "dk");  // (B, n, Hkv, D)
    Tensor dv = arena.alloc(DType::bf16, {B, n, Hkv, D}, "dv");  // (B, n, Hkv, D)
    upload(q, gather_tokens(p.q, B, p.T, H * D, pos));
    upload(k, gather_tokens(p.k, B, p.T, Hkv * D, pos));
    upload(v, gather_tokens(p.v, B, p.T, Hkv * D, pos));
    upload(dout, gather_tokens(p.dout, B, p.T, H * D, pos));
    for (const Tensor& t : {out, lse, dq, dk, dv}) fill(t, std::nanf(""));  // poison
    RingAttention attn(ring, layout, causal, {B, n, H, Hkv, D, DType::bf16}, arena);
    attn.forward(q, k, v, out, lse);
    attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
    accumulate(err[kOut], download(out), ref.out, B, p.T, H * D, pos, true);
    accumulate(err[kLse], download(lse), ref.lse, B, p.T, H, pos, false);
    accumulate(err[kDq], download(dq), ref.dq, B, p.T, H * D, pos, true);
    accumulate(err[kDk], download(dk), ref.dk, B, p.T, Hkv * D, pos, true);
    accumulate(err[kDv], download(dv), ref.dv, B, p.T, Hkv * D, pos, true);
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

bool gpu_present() {
  // Every rank must take the same branch (a skip on one rank only would leave the others in a collective).
  int here = cuda_available() ? 1 : 0, all = 0;
  MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

}  // namespace

class GpuRingAttention : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(GpuRingAttention, SharedGpuRanksMatchSingleRankGpuAndReference) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const auto [layout, causal] = GetParam();
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_GE(world, 4) << "run with mpirun -np 4";
  const Problem p = make_problem(causal ? 17 : 23);
  const Reference ref = reference(p, causal);
  std::array<double, kNumQuantities> base{};
  for (int cp : {1, 2, 4}) {
    double bad = 0;
    const std::array<double, kNumQuantities> rel = run_ring(p, ref, cp, cp == 1 ? Layout::contiguous : layout,
                                                            causal, &bad);
    if (cp == 1) base = rel;
    EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
    for (int i = 0; i < kNumQuantities; ++i) {
      EXPECT_LE(rel[size_t(i)], kTolerance) << kNames[i] << " cp=" << cp;
      EXPECT_LE(rel[size_t(i)], kGrowth * base[size_t(i)] + kSlack)
          << kNames[i] << " cp=" << cp << ": the ring adds error over the single-rank GPU result " << base[size_t(i)];
    }
    if (rank == 0)
      std::printf("[ %s causal=%d cp=%d ] rel err O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n", layout_name(layout),
                  int(causal), cp, rel[0], rel[1], rel[2], rel[3], rel[4]);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRingAttention,
                         ::testing::Values(std::make_tuple(Layout::zigzag, true),
                                           std::make_tuple(Layout::contiguous, false)),
                         [](const auto& info) {
                           return std::string(layout_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_causal" : "_full");
                         });
