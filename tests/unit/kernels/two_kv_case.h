// A case of attn_fwd_whole_two_kv and attn_bwd_block_fresh_two_kv (kernels/op_list.inc), shared by their CPU tests
// (tests/unit/kernels/test_attn_{fwd,bwd}_two_kv_cpu.cpp) and GPU tests (tests/gpu/test_attn_{fwd,bwd}_two_kv.cpp):
// the gather scheme's calls on one rank. Per sample, T positions cut into documents of random lengths (seeded, some
// of length 1); the rank holds two chunks of positions (its queries and its own keys, source 1, n rows); source 2 holds the positions of
// other chunks that one of its queries sees (in position order), then a few that none sees, padded with position T
// to R rows (the same R for every sample). The key list: source 1's n rows, the gap up to attn_second_kv_row(n)
// (position T: no query sees it), then source 2. Values are fresh random bf16-rounded numbers; the reference is the
// fp64 attention over the list with zero K / V in the gap (test_reference.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "tests/unit/test_reference.h"

namespace rt::test {

// The CPU tests' helpers: round to nearest even at bf16 (the values both backends read), and a host f32 tensor
// holding v.
inline float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

inline HostTensor host(const std::vector<float>& v, const std::vector<int64_t>& dims) {
  HostTensor h = f32(dims);
  std::memcpy(h.f(), v.data(), v.size() * 4);
  return h;
}

struct TwoKvCase {
  int64_t B, H, Hkv, D, T, n, R, list;  // list = attn_second_kv_row(n) + R
  std::vector<int64_t> q_pos, q_doc;     // (B, n) the queries' positions and document starts
  std::vector<int64_t> k_pos;            // (B, list) the key list's positions
  std::vector<float> q;                  // (B, n, H, D)
  std::vector<float> k1, v1;             // (B, n, Hkv, D) source 1: the queries' own keys
  std::vector<float> k2, v2;             // (B, R, Hkv, D) source 2
  std::vector<float> k_list, v_list;     // (B, list, Hkv, D) both sources in list order, zero in the gap
  AttnMask mask() const {  // over host arrays; a GPU caller swaps the pointers for device copies
    AttnMask m;
    m.docs.q_pos = q_pos.data();
    m.docs.q_doc_start = q_doc.data();
    m.docs.k_pos = k_pos.data();
    m.docs.q_stride = n;
    m.docs.k_stride = list;
    return m;
  }
};

// round: the bf16 rounding of the caller's test utilities (values must be representable in bf16 on both sides).
// doc_lengths: the documents of every sample (summing to T), or empty for random ones; unseen_one_in: one in this
// many positions that no query sees joins source 2 (0: none).
template <class Round>
TwoKvCase make_two_kv_case(int64_t B, int64_t H, int64_t Hkv, int64_t D, int64_t T, int64_t a0, int64_t a1,
                           int64_t b0, int64_t b1, uint64_t seed, Round round,
                           const std::vector<int64_t>& doc_lengths = {}, int unseen_one_in = 16) {
  TwoKvCase c;
  c.B = B, c.H = H, c.Hkv = Hkv, c.D = D, c.T = T, c.n = (a1 - a0) + (b1 - b0), c.R = 0, c.list = 0;
  std::mt19937_64 rng(seed);
  // Source 2's positions per sample: those an own query sees, and some no query sees.
  std::vector<std::vector<int64_t>> seen(static_cast<size_t>(B)), unseen(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> start(static_cast<size_t>(T));  // document start by position
    for (int64_t p = 0, k = 0; p < T; ++k) {
      const int64_t len = !doc_lengths.empty() ? doc_lengths[size_t(k)] : rng() % 7 == 0 ? 1 : 1 + int64_t(rng() % 400);
      for (int64_t t = p; t < std::min(T, p + len); ++t) start[size_t(t)] = p;
      p += len;
    }
    std::vector<int64_t> own;
    for (int64_t p = a0; p < a1; ++p) own.push_back(p);
    for (int64_t p = b0; p < b1; ++p) own.push_back(p);
    std::vector<int64_t> last_own(static_cast<size_t>(T), -1);  // per document start, the last own position in it
    for (int64_t p : own) {
      c.q_pos.push_back(p);
      c.q_doc.push_back(start[size_t(p)]);
      last_own[size_t(start[size_t(p)])] = std::max(last_own[size_t(start[size_t(p)])], p);
    }
    for (int64_t p = 0; p < T; ++p) {
      if ((p >= a0 && p < a1) || (p >= b0 && p < b1)) continue;
      if (p < last_own[size_t(start[size_t(p)])]) seen[size_t(b)].push_back(p);
      else if (unseen_one_in > 0 && rng() % uint64_t(unseen_one_in) == 0)
        unseen[size_t(b)].push_back(p);  // after every own query of its document
    }
    c.R = std::max<int64_t>(c.R, int64_t(seen[size_t(b)].size() + unseen[size_t(b)].size()));
  }
  const int64_t s2 = attn_second_kv_row(c.n);
  c.list = s2 + c.R;
  const int64_t W = Hkv * D;
  auto random = [&](int64_t count) {
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(count));
    for (float& e : x) e = round(dist(rng));
    return x;
  };
  c.q = random(B * c.n * H * D);
  c.k1 = random(B * c.n * W);
  c.v1 = random(B * c.n * W);
  c.k2 = random(B * c.R * W);
  c.v2 = random(B * c.R * W);
  c.k_list.assign(size_t(B * c.list * W), 0.f);
  c.v_list.assign(size_t(B * c.list * W), 0.f);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> second = seen[size_t(b)];
    second.insert(second.end(), unseen[size_t(b)].begin(), unseen[size_t(b)].end());
    std::sort(second.begin(), second.end());
    second.resize(size_t(c.R), T);  // padding: no query sees position T
    for (int64_t j = 0; j < c.list; ++j) {
      const bool first = j < c.n, gap = !first && j < s2;
      c.k_pos.push_back(first ? c.q_pos[size_t(b * c.n + j)] : gap ? T : second[size_t(j - s2)]);
      if (gap) continue;
      const float* ks = first ? &c.k1[size_t((b * c.n + j) * W)] : &c.k2[size_t((b * c.R + j - s2) * W)];
      const float* vs = first ? &c.v1[size_t((b * c.n + j) * W)] : &c.v2[size_t((b * c.R + j - s2) * W)];
      std::copy(ks, ks + W, c.k_list.begin() + (b * c.list + j) * W);
      std::copy(vs, vs + W, c.v_list.begin() + (b * c.list + j) * W);
    }
  }
  return c;
}

// Appends `extra` rows to every sample's source 2 that no query sees (position T), with fresh random K / V: with
// extra >= 128 source 2 ends in key tiles of which no query sees a key (the backward must write their dK / dV as zero).
template <class Round>
void pad_second_source(TwoKvCase& c, int64_t extra, uint64_t seed, Round round) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  const int64_t W = c.Hkv * c.D, R2 = c.R + extra, list2 = c.list + extra;
  std::vector<float> k2(size_t(c.B * R2 * W)), v2(size_t(c.B * R2 * W));  // (B, R2, Hkv, D)
  std::vector<float> k_list(size_t(c.B * list2 * W)), v_list(size_t(c.B * list2 * W));  // (B, list2, Hkv, D)
  std::vector<int64_t> k_pos;                                                           // (B, list2)
  for (int64_t b = 0; b < c.B; ++b) {
    std::copy(c.k2.begin() + b * c.R * W, c.k2.begin() + (b + 1) * c.R * W, k2.begin() + b * R2 * W);
    std::copy(c.v2.begin() + b * c.R * W, c.v2.begin() + (b + 1) * c.R * W, v2.begin() + b * R2 * W);
    for (int64_t e = c.R * W; e < R2 * W; ++e) {
      k2[size_t(b * R2 * W + e)] = round(dist(rng));
      v2[size_t(b * R2 * W + e)] = round(dist(rng));
    }
    std::copy(c.k_list.begin() + b * c.list * W, c.k_list.begin() + (b + 1) * c.list * W, k_list.begin() + b * list2 * W);
    std::copy(c.v_list.begin() + b * c.list * W, c.v_list.begin() + (b + 1) * c.list * W, v_list.begin() + b * list2 * W);
    std::copy(k2.begin() + (b * R2 + c.R) * W, k2.begin() + (b + 1) * R2 * W, k_list.begin() + (b * list2 + c.list) * W);
    std::copy(v2.begin() + (b * R2 + c.R) * W, v2.begin() + (b + 1) * R2 * W, v_list.begin() + (b * list2 + c.list) * W);
    k_pos.insert(k_pos.end(), c.k_pos.begin() + b * c.list, c.k_pos.begin() + (b + 1) * c.list);
    k_pos.insert(k_pos.end(), size_t(extra), c.T);
  }
  c.k2 = std::move(k2), c.v2 = std::move(v2), c.k_list = std::move(k_list), c.v_list = std::move(v_list);
  c.k_pos = std::move(k_pos);
  c.R = R2, c.list = list2;
}

// The fp64 gradients of a case: out and lse over the key list (attention_forward_ref), delta = rowsum(dout * out),
// then dQ and dK / dV over the list (attention_backward_ref), split into the two sources' rows.
struct TwoKvGrads {
  std::vector<double> lse, delta;  // (B, H, n)
  std::vector<double> dq;          // (B, n, H, D)
  std::vector<double> dk1, dv1;    // (B, n, Hkv, D)
  std::vector<double> dk2, dv2;    // (B, R, Hkv, D)
};

// dout (B, n, H, D).
inline TwoKvGrads two_kv_grads(const TwoKvCase& c, const std::vector<float>& dout) {
  TwoKvGrads g;
  const AttnShape shape{c.B, c.n, c.list, c.H, c.Hkv, c.D};
  std::vector<double> out;  // (B, n, H, D)
  attention_forward_ref(shape, c.q.data(), c.k_list.data(), c.v_list.data(), c.mask(), out, g.lse);
  g.delta.assign(size_t(c.B * c.H * c.n), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t h = 0; h < c.H; ++h) {
        double s = 0;
        for (int64_t d = 0; d < c.D; ++d) {
          const size_t e = size_t(((b * c.n + i) * c.H + h) * c.D + d);
          s += double(dout[e]) * out[e];
        }
        g.delta[size_t((b * c.H + h) * c.n + i)] = s;
      }
  std::vector<double> dk, dv;  // (B, list, Hkv, D)
  attention_backward_ref(shape, c.q.data(), c.k_list.data(), c.v_list.data(), dout.data(), g.lse.data(),
                         g.delta.data(), c.mask(), g.dq, dk, dv);
  const int64_t W = c.Hkv * c.D, s2 = attn_second_kv_row(c.n);
  for (int64_t b = 0; b < c.B; ++b) {
    const auto row = [&](const std::vector<double>& x, int64_t j) { return x.begin() + (b * c.list + j) * W; };
    g.dk1.insert(g.dk1.end(), row(dk, 0), row(dk, c.n));
    g.dv1.insert(g.dv1.end(), row(dv, 0), row(dv, c.n));
    g.dk2.insert(g.dk2.end(), row(dk, s2), row(dk, c.list));
    g.dv2.insert(g.dv2.end(), row(dv, s2), row(dv, c.list));
  }
  return g;
}

}  // namespace rt::test
