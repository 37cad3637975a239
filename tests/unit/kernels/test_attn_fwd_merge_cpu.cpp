// attn_fwd_merge on the host: the whole-call results of two halves of the keys, merged, equal the whole call over
// all keys (fp32 kernel, and the fp64 reference); rows with no key on one side (lse = -inf, weight 0) or on both
// (out 0, lse -inf kept); rows outside the merged range untouched. And gathered_fwd_merge (parallel/
// gather_forward.h): the own call plus the gathered call on the rows gathered_query_rows finds equals one call over
// own and gathered keys together.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kernels/cpu/attention/attention_common.h"
#include "parallel/cp/gather_forward.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::AttnShape;
using test::HostTensor;

constexpr int64_t kB = 2, kN = 96, kH = 4, kHkv = 2, kD = 16;

// Per sample, the positions 0..kN-1 cut into documents of the given lengths (cycled): start (B, N) by row.
std::vector<int64_t> doc_starts(const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<int64_t> start(size_t(kB * kN));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t p = 0, k = 0; p < kN; k = (k + 1) % int64_t(lengths[size_t(b)].size())) {
      const int64_t len = lengths[size_t(b)][size_t(k)];
      for (int64_t t = p; t < std::min(kN, p + len); ++t) start[size_t(b * kN + t)] = p;
      p += len;
    }
  return start;
}

struct Result {
  HostTensor out, lse;
};

// attn_fwd_whole of q (B, kN) against the Nk keys (k, v, k_pos), outputs poisoned first.
Result whole_call(const HostTensor& q, const HostTensor& k, const HostTensor& v, const std::vector<int64_t>& q_pos,
                  const std::vector<int64_t>& q_start, const std::vector<int64_t>& k_pos, int64_t Nk) {
  HostTensor acc = test::f32({kB, kH, kN, kD}), m = test::f32({kB, kH, kN}), l = test::f32({kB, kH, kN});
  AttnState st{acc.t, m.t, l.t};
  Result r{test::f32({kB, kN, kH, kD}), test::f32({kB, kH, kN})};
  test::poison(r.out);
  test::poison(r.lse);
  AttnMask mask;
  mask.docs.q_pos = q_pos.data();
  mask.docs.q_doc_start = q_start.data();
  mask.docs.k_pos = k_pos.data();
  mask.docs.q_stride = kN;
  mask.docs.k_stride = Nk;
  attn_fwd_whole(q, k, v, st, mask, r.out, r.lse);
  return r;
}

// Rows [k0, k1) of each sample of a (B, N, ...) tensor of row width w.
HostTensor key_rows(const HostTensor& t, int64_t k0, int64_t k1, int64_t w) {
  HostTensor out = test::f32({kB, k1 - k0, t.t.shape[2], t.t.shape[3]});
  for (int64_t b = 0; b < kB; ++b)
    std::memcpy(out.f() + b * (k1 - k0) * w, t.f() + (b * kN + k0) * w, size_t((k1 - k0) * w) * 4);
  return out;
}
std::vector<int64_t> pos_rows(const std::vector<int64_t>& p, int64_t k0, int64_t k1) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < kB; ++b) out.insert(out.end(), p.begin() + b * kN + k0, p.begin() + b * kN + k1);
  return out;
}

double rel(const HostTensor& a, const HostTensor& ref) {
  std::vector<double> r = ref.to_double();
  for (double& x : r) x = std::isinf(x) ? 0.0 : x;  // the -inf rows are checked exactly apart
  HostTensor a2 = test::f32({a.numel()});
  for (int64_t i = 0; i < a.numel(); ++i) a2[i] = std::isinf(a[i]) && std::isinf(ref[i]) ? 0.f : a[i];
  return test::rel_err(a2, r);
}

TEST(AttnFwdMerge, TwoKeyHalvesMergeToTheWholeCall) {
  // Sample 0: documents [0,5) [5,22) [22,23) [23,53) [53,61) [61,96); the keys of [22,23) and [53,61) are moved
  // after every query (position kN), so rows 22 and 53..60 see no key at all. Halves: key rows [0,48) and [48,96):
  // rows 40..47 see only the first (lse2 = -inf), rows 61..95 only the second (lse = -inf). Sample 1: other cuts.
  const std::vector<int64_t> start = doc_starts({{5, 17, 1, 30, 8, 35}, {3, 50, 43}});
  std::vector<int64_t> pos(size_t(kB * kN)), k_pos(size_t(kB * kN));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t i = 0; i < kN; ++i) {
      pos[size_t(b * kN + i)] = i;
      const bool hidden = b == 0 && (i == 22 || (i >= 53 && i < 61));
      k_pos[size_t(b * kN + i)] = hidden ? kN : i;
    }
  const HostTensor q = test::random_f32({kB, kN, kH, kD}, 41, -2.f, 2.f);
  const HostTensor k = test::random_f32({kB, kN, kHkv, kD}, 42, -2.f, 2.f);
  const HostTensor v = test::random_f32({kB, kN, kHkv, kD}, 43);
  const int64_t half = kN / 2, W = kHkv * kD, lo = 40;
  const Result whole = whole_call(q, k, v, pos, start, k_pos, kN);
  Result a =
      whole_call(q, key_rows(k, 0, half, W), key_rows(v, 0, half, W), pos, start, pos_rows(k_pos, 0, half), half);
  const Result b = whole_call(q, key_rows(k, half, kN, W), key_rows(v, half, kN, W), pos, start,
                              pos_rows(k_pos, half, kN), kN - half);
  // The second result of rows [lo, kN) only, as the gathered call writes it: (B, M, H, D) and (B, H, M).
  const int64_t M = kN - lo;
  HostTensor out2 = test::f32({kB, M, kH, kD}), lse2 = test::f32({kB, kH, M});
  for (int64_t bb = 0; bb < kB; ++bb) {
    std::memcpy(out2.f() + bb * M * kH * kD, b.out.f() + (bb * kN + lo) * kH * kD, size_t(M * kH * kD) * 4);
    for (int64_t h = 0; h < kH; ++h)
      std::memcpy(lse2.f() + (bb * kH + h) * M, b.lse.f() + (bb * kH + h) * kN + lo, size_t(M) * 4);
  }
  // Rows of result 2 with no key hold out 0 (the kernels' convention); poison them to show they are not read.
  int one_side = 0, both = 0;
  for (int64_t bb = 0; bb < kB; ++bb)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < M; ++i) {
        const bool none2 = lse2[(bb * kH + h) * M + i] == -INFINITY;
        const bool none1 = a.lse[(bb * kH + h) * kN + lo + i] == -INFINITY;
        one_side += none1 != none2;
        both += none1 && none2;
        if (none2)
          for (int64_t e = 0; e < kD; ++e) out2[((bb * M + i) * kH + h) * kD + e] = NAN;
      }
  ASSERT_GT(one_side, 0) << "the case must hold rows with no key on one side";
  ASSERT_GT(both, 0) << "the case must hold rows with no key on either side";
  const std::vector<float> before(a.out.f(), a.out.f() + a.out.numel());
  attn_fwd_merge(a.out, a.lse, out2, lse2, lo);
  ASSERT_FALSE(test::any_nan(a.out) || test::any_nan(a.lse));
  EXPECT_LT(rel(a.out, whole.out), 1e-5);
  EXPECT_LT(rel(a.lse, whole.lse), 1e-5);
  for (int64_t bb = 0; bb < kB; ++bb)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < kN; ++i) {
        const float lw = whole.lse[(bb * kH + h) * kN + i], lm = a.lse[(bb * kH + h) * kN + i];
        ASSERT_EQ(std::isinf(lw), std::isinf(lm)) << "sample " << bb << " head " << h << " row " << i;
        for (int64_t e = 0; e < kD; ++e) {
          const int64_t x = ((bb * kN + i) * kH + h) * kD + e;
          if (std::isinf(lw)) {
            ASSERT_EQ(a.out[x], 0.f) << "a row with no key keeps out 0";
          }
          if (i < lo) {
            ASSERT_EQ(a.out[x], before[size_t(x)]) << "rows before the range are untouched";
          }
        }
      }
  // Against the fp64 reference over all keys too.
  std::vector<double> out_ref, lse_ref;
  AttnMask mask;
  mask.docs.q_pos = pos.data();
  mask.docs.q_doc_start = start.data();
  mask.docs.k_pos = k_pos.data();
  mask.docs.q_stride = mask.docs.k_stride = kN;
  test::attention_forward_ref(AttnShape{kB, kN, kN, kH, kHkv, kD}, q.f(), k.f(), v.f(), mask, out_ref, lse_ref);
  EXPECT_LT(test::rel_err(a.out, out_ref), 2e-5);
  EXPECT_LT(test::lse_err(a.lse, lse_ref), 2e-5);
}

TEST(AttnFwdMerge, RefusesARangePastTheRows) {
  HostTensor out = test::f32({1, 8, 2, 4}), lse = test::f32({1, 2, 8});
  HostTensor out2 = test::f32({1, 5, 2, 4}), lse2 = test::f32({1, 2, 5});
  EXPECT_THROW(attn_fwd_merge(out, lse, out2, lse2, 4), Error);
  EXPECT_NO_THROW(attn_fwd_merge(out, lse, out2, lse2, 3));
}

// The gather forward on one rank: own keys (a block of positions) and gathered keys (earlier positions of the
// rank's documents); own call + gathered_fwd_merge on gathered_query_rows equals one call over both key sets.
TEST(GatheredFwdMerge, OwnPlusGatheredRowsEqualsOneCallOverBoth) {
  // The rank holds positions [48, 96) of each sample; the gathered keys are the positions before 48 of the
  // documents it holds (their first positions), as the plan sends them.
  const std::vector<int64_t> start_all = doc_starts({{30, 25, 41}, {50, 46}});  // by position
  const int64_t n = kN / 2, own0 = kN / 2;
  std::vector<int64_t> q_pos(size_t(kB * n)), q_start(size_t(kB * n));  // (B, n)
  std::vector<std::vector<int64_t>> gathered(kB);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      q_pos[size_t(b * n + i)] = own0 + i;
      q_start[size_t(b * n + i)] = start_all[size_t(b * kN + own0 + i)];
    }
    for (int64_t p = q_start[size_t(b * n)]; p < own0; ++p) gathered[size_t(b)].push_back(p);
  }
  const int64_t R = std::max(gathered[0].size(), gathered[1].size());  // sample 1 pads with position kN
  std::vector<int64_t> g_pos(size_t(kB * R), kN), all_pos(size_t(kB * (n + R)));
  for (int64_t b = 0; b < kB; ++b)
    for (size_t j = 0; j < gathered[size_t(b)].size(); ++j) g_pos[size_t(b * R) + j] = gathered[size_t(b)][j];
  QueryRowRange rows;
  for (int64_t b = 0; b < kB; ++b)
    rows = row_range_union(rows, gathered_query_rows(q_pos.data() + b * n, q_start.data() + b * n, n,
                                                     gathered[size_t(b)]));
  // Sample 0: documents [30,55) and [55,96): only rows of [30,55), local 0..6, see a gathered key; sample 1: the
  // document [0,50) gives local 0..1. The union is [0, 7).
  EXPECT_EQ(rows.lo, 0);
  EXPECT_EQ(rows.hi, 7);
  const HostTensor q = test::random_f32({kB, n, kH, kD}, 51, -2.f, 2.f);
  const HostTensor k = test::random_f32({kB, n, kHkv, kD}, 52, -2.f, 2.f), v = test::random_f32({kB, n, kHkv, kD}, 53);
  const HostTensor gk = test::random_f32({kB, R, kHkv, kD}, 54, -2.f, 2.f);
  const HostTensor gv = test::random_f32({kB, R, kHkv, kD}, 55);
  // Both key sets in one (B, n + R) call.
  HostTensor ak = test::f32({kB, n + R, kHkv, kD}), av = test::f32({kB, n + R, kHkv, kD});
  const int64_t W = kHkv * kD;
  for (int64_t b = 0; b < kB; ++b) {
    std::memcpy(ak.f() + b * (n + R) * W, k.f() + b * n * W, size_t(n * W) * 4);
    std::memcpy(ak.f() + (b * (n + R) + n) * W, gk.f() + b * R * W, size_t(R * W) * 4);
    std::memcpy(av.f() + b * (n + R) * W, v.f() + b * n * W, size_t(n * W) * 4);
    std::memcpy(av.f() + (b * (n + R) + n) * W, gv.f() + b * R * W, size_t(R * W) * 4);
    for (int64_t i = 0; i < n; ++i) all_pos[size_t(b * (n + R) + i)] = q_pos[size_t(b * n + i)];
    for (int64_t j = 0; j < R; ++j) all_pos[size_t(b * (n + R) + n + j)] = g_pos[size_t(b * R + j)];
  }
  auto mask_of = [&](const int64_t* k_pos, int64_t Nk) {
    AttnMask m;
    m.docs.q_pos = q_pos.data();
    m.docs.q_doc_start = q_start.data();
    m.docs.k_pos = k_pos;
    m.docs.q_stride = n;
    m.docs.k_stride = Nk;
    return m;
  };
  HostTensor acc = test::f32({kB, kH, n, kD}), m = test::f32({kB, kH, n}), l = test::f32({kB, kH, n});
  AttnState st{acc.t, m.t, l.t};
  HostTensor ref_out = test::f32({kB, n, kH, kD}), ref_lse = test::f32({kB, kH, n});
  attn_fwd_whole(q, ak, av, st, mask_of(all_pos.data(), n + R), ref_out, ref_lse);
  HostTensor out = test::f32({kB, n, kH, kD}), lse = test::f32({kB, kH, n});
  HostTensor out2 = test::f32({kB, n, kH, kD}), lse2 = test::f32({kB, kH, n});
  test::poison(out);
  test::poison(lse);
  test::poison(out2);
  test::poison(lse2);
  attn_fwd_whole(q, k, v, st, mask_of(q_pos.data(), n), out, lse);
  test::poison(acc);
  gathered_fwd_merge(q, gk, gv, mask_of(g_pos.data(), R), rows, out2, lse2, st, out, lse);
  ASSERT_FALSE(test::any_nan(out) || test::any_nan(lse));
  EXPECT_LT(rel(out, ref_out), 1e-5);
  EXPECT_LT(rel(lse, ref_lse), 1e-5);
}

}  // namespace
}  // namespace rt
