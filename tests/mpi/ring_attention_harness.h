// Shared by the ring-attention suites (test_ring_attention.cpp on CPU f32, test_gpu_ring_attention.cpp on
// CUDA bf16): a seeded attention problem, the naive fp64 single-sequence reference (forward and backward),
// and one ring run on world ranks [0, cp) whose outputs are un-permuted by layout positions and compared
// with the reference; the error sums are reduced over the whole world (idle ranks only join the reduction).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

struct AttentionProblem {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0;
  std::vector<float> q, k, v, dout;  // (B,T,H,D), (B,T,Hkv,D) x2, (B,T,H,D)
};

// Fresh normal(0, 1) inputs from `seed`; `round_to_bf16`: every value exact in bf16, so that the reference
// sees what a bf16 ring sees.
inline AttentionProblem make_attention_problem(uint64_t seed, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                               int64_t D, bool round_to_bf16) {
  AttentionProblem p;
  p.B = B, p.T = T, p.H = H, p.Hkv = Hkv, p.D = D;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill_normal = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& e : x) e = round_to_bf16 ? bf16_to_float(float_to_bf16(normal(rng))) : normal(rng);
  };
  fill_normal(p.q, B * T * H * D);
  fill_normal(p.k, B * T * Hkv * D);
  fill_normal(p.v, B * T * Hkv * D);
  fill_normal(p.dout, B * T * H * D);
  return p;
}

struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;  // (B,T,H,D), (B,H,T), (B,T,H,D), (B,T,Hkv,D) x2
};

// Naive fp64 attention forward and backward on the whole sequence.
inline AttentionReference attention_reference(const AttentionProblem& p, bool causal) {
  const int64_t B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  AttentionReference r;
  r.out.assign(size_t(B * T * H * D), 0.0);
  r.lse.assign(size_t(B * H * T), 0.0);
  r.dq.assign(size_t(B * T * H * D), 0.0);
  r.dk.assign(size_t(B * T * Hkv * D), 0.0);
  r.dv.assign(size_t(B * T * Hkv * D), 0.0);
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return size_t(((b * T + t) * H + h) * D); };
  auto ki = [&](int64_t b, int64_t t, int64_t h) { return size_t(((b * T + t) * Hkv + h) * D); };
  std::vector<double> P(size_t(T), 0.0);  // (T) one row of probabilities
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

// The whole sample on one CPU rank (the f32 kernels) under the document mask, positions in natural order:
// doc_start[b] (T) is the first position of the document of each position of sample b. What a ring with documents is
// held to; the CPU kernels with documents are themselves checked against fp64 (tests/unit/kernels/
// test_attention_docs_cpu.cpp).
inline AttentionReference document_attention_reference(const AttentionProblem& p,
                                                       const std::vector<std::vector<int64_t>>& doc_start) {
  const int64_t B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D;
  std::vector<int64_t> pos(size_t(B * T)), start(size_t(B * T));  // (B, T)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      pos[size_t(b * T + t)] = t;
      start[size_t(b * T + t)] = doc_start[size_t(b)][size_t(t)];
    }
  std::vector<float> q = p.q, k = p.k, v = p.v, dout = p.dout;
  std::vector<float> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());   // like q, k, v
  std::vector<float> lse(size_t(B * H * T)), delta(lse.size()), m(lse.size()), l(lse.size());  // (B, H, T)
  std::vector<float> acc(q.size());                                                              // (B, H, T, D)
  AttnState state{host_view(acc, {B, H, T, D}), host_view(m, {B, H, T}), host_view(l, {B, H, T})};
  AttnMask mask;
  mask.docs.q_pos = pos.data();
  mask.docs.q_doc_start = start.data();
  mask.docs.k_pos = pos.data();
  mask.docs.q_stride = mask.docs.k_stride = T;
  const Tensor tq = host_view(q, {B, T, H, D}), tk = host_view(k, {B, T, Hkv, D}), tv = host_view(v, {B, T, Hkv, D});
  const Tensor tout = host_view(out, {B, T, H, D}), tdout = host_view(dout, {B, T, H, D});
  attn_fwd_whole(tq, tk, tv, state, mask, tout, host_view(lse, {B, H, T}));
  attn_bwd_delta(tout, tdout, host_view(delta, {B, H, T}));
  attn_bwd_block_fresh(tq, tk, tv, tdout, host_view(lse, {B, H, T}), host_view(delta, {B, H, T}),
                       host_view(dq, {B, T, H, D}), host_view(dk, {B, T, Hkv, D}), host_view(dv, {B, T, Hkv, D}),
                       mask);  // dq starts at 0 (value-initialised) and accumulates
  AttentionReference r;
  r.out.assign(out.begin(), out.end());
  r.lse.assign(lse.begin(), lse.end());
  r.dq.assign(dq.begin(), dq.end());
  r.dk.assign(dk.begin(), dk.end());
  r.dv.assign(dv.begin(), dv.end());
  return r;
}

// Document start of every position of a T-token sample cut into the given lengths (cycled).
inline std::vector<int64_t> document_starts(int64_t T, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> start(static_cast<size_t>(T));
  int64_t p = 0;
  for (size_t k = 0; p < T; k = (k + 1) % lengths.size()) {
    for (int64_t t = 0; t < lengths[k] && p + t < T; ++t) start[size_t(p + t)] = p;
    p += lengths[k];
  }
  return start;
}

// The ring order (B, T) of a layout: per sample, rank s's layout_positions at columns [s n, (s + 1) n).
inline std::vector<int64_t> layout_ring_order(Layout layout, int64_t B, int64_t T, int cp) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < B; ++b)
    for (int s = 0; s < cp; ++s) {
      const std::vector<int64_t> pos = layout_positions(layout, T, cp, s);
      order.insert(order.end(), pos.begin(), pos.end());
    }
  return order;
}

// A random assignment of positions to ranks (B, T), different per sample; each rank's positions sorted, or (sorted =
// false) in random local order.
inline std::vector<int64_t> random_ring_order(int64_t B, int64_t T, int cp, uint64_t seed, bool sorted) {
  std::vector<int64_t> order;
  std::mt19937_64 rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> perm(static_cast<size_t>(T));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int s = 0; s < cp && sorted; ++s) std::sort(perm.begin() + s * (T / cp), perm.begin() + (s + 1) * (T / cp));
    order.insert(order.end(), perm.begin(), perm.end());
  }
  return order;
}

// Rows of a (B, T, row) array at the given global positions: (B, n, row).
inline std::vector<float> gather_tokens(const std::vector<float>& x, int64_t B, int64_t T, int64_t row,
                                        const std::vector<int64_t>& pos) {
  const int64_t n = int64_t(pos.size());
  std::vector<float> out(size_t(B * n * row));  // (B, n, row)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < row; ++e)
        out[size_t((b * n + t) * row + e)] = x[size_t((b * T + pos[size_t(t)]) * row + e)];
  return out;
}

// ||got - want||^2, ||want||^2 and the count of non-finite values in `got`.
struct ErrSum {
  double diff2 = 0, ref2 = 0, bad = 0;
};

// Accumulates one rank's rows, mapped to global token positions `pos`, into `e`. `token_major`: `got` is
// (B, n, row); otherwise (B, heads, n) with row = heads (LSE). `want` is the same over all T tokens.
inline void accumulate(ErrSum& e, const std::vector<float>& got, const std::vector<double>& want, int64_t B,
                       int64_t T, int64_t row, const std::vector<int64_t>& pos, bool token_major) {
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
inline const char* const kQuantityNames[kNumQuantities] = {"O", "LSE", "dQ", "dK", "dV"};
using RelErrors = std::array<double, kNumQuantities>;

// Sums every rank's error sums over MPI_COMM_WORLD; returns ||got - ref|| / ||ref|| per quantity and, in
// `bad_total`, the number of non-finite outputs over all quantities and ranks.
inline RelErrors reduce_errors(const ErrSum (&err)[kNumQuantities], double* bad_total) {
  double sums[3 * kNumQuantities];
  for (int i = 0; i < kNumQuantities; ++i) {
    sums[3 * i] = err[i].diff2;
    sums[3 * i + 1] = err[i].ref2;
    sums[3 * i + 2] = err[i].bad;
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 3 * kNumQuantities, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  RelErrors rel{};
  *bad_total = 0;
  for (int i = 0; i < kNumQuantities; ++i) {
    rel[size_t(i)] = std::sqrt(sums[3 * i] / sums[3 * i + 1]);
    *bad_total += sums[3 * i + 2];
  }
  return rel;
}

// One rank's attention tensors from `arena`: its layout positions' tokens of p's Q, K, V, dO uploaded, the outputs
// poisoned with NaN.
struct RankTensors {
  Tensor q, k, v, dout;     // (B, n, H or Hkv, D) in dt: the inputs
  Tensor out, lse;          // (B, n, H, D) dt, (B, H, n) f32
  Tensor dq, dk, dv;        // (B, n, H or Hkv, D) dt
};
inline RankTensors rank_tensors(Arena& arena, const AttentionProblem& p, const std::vector<int64_t>& pos, DType dt) {
  const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
  RankTensors t;
  t.q = arena.alloc(dt, {B, n, H, D}, "q");
  t.k = arena.alloc(dt, {B, n, Hkv, D}, "k");
  t.v = arena.alloc(dt, {B, n, Hkv, D}, "v");
  t.dout = arena.alloc(dt, {B, n, H, D}, "do");
  t.out = arena.alloc(dt, {B, n, H, D}, "o");
  t.lse = arena.alloc(DType::f32, {B, H, n}, "lse");
  t.dq = arena.alloc(dt, {B, n, H, D}, "dq");
  t.dk = arena.alloc(dt, {B, n, Hkv, D}, "dk");
  t.dv = arena.alloc(dt, {B, n, Hkv, D}, "dv");
  upload(t.q, gather_tokens(p.q, B, p.T, H * D, pos));
  upload(t.k, gather_tokens(p.k, B, p.T, Hkv * D, pos));
  upload(t.v, gather_tokens(p.v, B, p.T, Hkv * D, pos));
  upload(t.dout, gather_tokens(p.dout, B, p.T, H * D, pos));
  for (const Tensor& x : {t.out, t.lse, t.dq, t.dk, t.dv}) fill(x, std::nanf(""));  // poison
  return t;
}

// Where the ring's tensors live: O, dQ, dK, dV (and Q, K, V, dO) in `dtype` on `device`; LSE is always f32.
struct RingTensors {
  Device device;
  DType dtype;
  size_t arena_bytes;  // inputs, outputs and the ring's own scratch
  // The ring's communicator over the members' MPI communicator (taken over); empty: MpiComm.
  std::function<std::shared_ptr<Comm>(MPI_Comm)> make_comm = {};
  bool fp8_backward = false;  // RingAttention::set_fp8_backward (fp8.attention)
};

// Ring attention on a ring of `cp` ranks (world ranks [0, cp); the others only join the error reduction):
// each member gets its layout positions' tokens, outputs are poisoned with NaN before the calls, then
// forward and backward run and the outputs are compared with `ref`. Returns the global relative errors.
inline RelErrors run_ring(const AttentionProblem& p, const AttentionReference& ref, int cp, Layout layout,
                          bool causal, const RingTensors& on, double* bad_total) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const bool member = world_rank < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &sub);
  ErrSum err[kNumQuantities];
  if (member) {
    std::shared_ptr<Comm> ring_comm =
        on.make_comm ? on.make_comm(sub) : std::make_shared<MpiComm>(sub, /*owned=*/true);
    Comm& ring = *ring_comm;
    const std::vector<int64_t> pos = layout_positions(layout, p.T, cp, ring.rank());
    const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
    const DType dt = on.dtype;
    Arena arena(on.device, on.arena_bytes);
    const RankTensors t = rank_tensors(arena, p, pos, dt);
    const Tensor &q = t.q, &k = t.k, &v = t.v, &dout = t.dout, &out = t.out, &lse = t.lse, &dq = t.dq, &dk = t.dk,
                 &dv = t.dv;
    RingAttention attn(ring, layout, causal, {B, n, H, Hkv, D, dt}, arena);
    attn.set_fp8_backward(on.fp8_backward);
    attn.forward(q, k, v, out, lse);
    attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
    accumulate(err[kOut], download(out), ref.out, B, p.T, H * D, pos, true);
    accumulate(err[kLse], download(lse), ref.lse, B, p.T, H, pos, false);
    accumulate(err[kDq], download(dq), ref.dq, B, p.T, H * D, pos, true);
    accumulate(err[kDk], download(dk), ref.dk, B, p.T, Hkv * D, pos, true);
    accumulate(err[kDv], download(dv), ref.dv, B, p.T, Hkv * D, pos, true);
  }
  return reduce_errors(err, bad_total);
}

}  // namespace rt::test
