// The CPU decode ops (kernels/cpu/attention/attn_decode.cpp, attn_state_merge.cpp) against the fp64 reference of
// tests/unit/attn_decode_reference.h: GQA groups of 1, 4 and 8, B > 1 with ragged lengths (one of them 0), lengths
// that are not a multiple of any tile, head dims 64 and 128; the partial state of two halves of a cache merged
// equals the whole; bad inputs (a workspace whose arrival counters are not zero among them) are refused with the
// argument named.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "kernels/attention.h"
#include "tests/unit/attn_decode_reference.h"

namespace rt {
namespace {
using test::DecodeShape;

constexpr double kOutTol = 1e-5;  // fp32 kernel vs fp64, relative norm
constexpr double kLseTol = 1e-5;  // absolute

std::vector<float> fresh(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> values(static_cast<size_t>(n));
  for (auto& x : values) x = dist(rng);
  return values;
}
Tensor view(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::f32, Device::cpu(), dims);
}
std::vector<float> nans(int64_t n) { return std::vector<float>(size_t(n), std::nanf("")); }
// A decode workspace as a caller sets it up: the arrival counters at its front zero, the rest NaN (unused here).
std::vector<float> decode_work(const DecodeShape& s, int64_t Nk) {
  std::vector<float> work = nans(attn_decode_work_elems(s.B, s.H, s.Hkv, s.D, Nk));
  std::fill(work.begin(), work.begin() + attn_decode_counter_elems(s.B, s.H), 0.f);
  return work;
}

struct Case {
  DecodeShape s;
  std::vector<float> q, k, v;
  explicit Case(DecodeShape shape) : s(std::move(shape)) {
    std::mt19937_64 rng(std::random_device{}());  // fresh inputs every run
    q = fresh(s.B * s.H * s.D, rng);
    k = fresh(s.B * s.Nk * s.Hkv * s.D, rng);
    v = fresh(s.B * s.Nk * s.Hkv * s.D, rng);
  }
  Tensor tq() { return view(q, {s.B, 1, s.H, s.D}); }
  Tensor tk() { return view(k, {s.B, s.Nk, s.Hkv, s.D}); }
  Tensor tv() { return view(v, {s.B, s.Nk, s.Hkv, s.D}); }
};

const DecodeShape kShapes[] = {
    {1, 8, 8, 64, 300, {300}},                 // group 1
    {2, 8, 2, 128, 1000, {1000, 517}},         // group 4, ragged
    {3, 16, 2, 64, 257, {257, 1, 0}},          // group 8, a length of one row and an empty sequence
    {2, 32, 8, 128, 4099, {4099, 2051}},       // the benchmark's heads
};

TEST(AttnDecodeCpu, MatchesFp64ReferenceFinalAndPartial) {
  for (const DecodeShape& shape : kShapes) {
    Case c(shape);
    const DecodeShape& s = c.s;
    SCOPED_TRACE("B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " Hkv=" + std::to_string(s.Hkv) +
                 " D=" + std::to_string(s.D) + " Nk=" + std::to_string(s.Nk));
    const test::DecodeReference ref = test::decode_reference(s, c.q, c.k, c.v);
    std::vector<int32_t> lens = s.lens;
    const Tensor len(lens.data(), DType::i32, Device::cpu(), {s.B});
    std::vector<float> work = decode_work(s, s.Nk);
    std::vector<float> out = nans(s.B * s.H * s.D), lse = nans(s.B * s.H);
    attn_decode(c.tq(), c.tk(), c.tv(), len, view(work, {int64_t(work.size())}), view(out, {s.B, 1, s.H, s.D}),
                view(lse, {s.B, s.H, 1}));
    EXPECT_LE(test::decode_rel_error(out, ref.out), kOutTol);
    EXPECT_LE(test::decode_lse_error(lse, ref.lse), kLseTol);

    // The partial state, finished by attn_fwd_finalize, gives the same.
    std::vector<float> acc = nans(s.B * s.H * s.D), m = nans(s.B * s.H), l = nans(s.B * s.H);
    AttnState st{view(acc, {s.B, s.H, 1, s.D}), view(m, {s.B, s.H, 1}), view(l, {s.B, s.H, 1})};
    attn_decode_partial(c.tq(), c.tk(), c.tv(), len, view(work, {int64_t(work.size())}), st);
    std::vector<float> out2 = nans(s.B * s.H * s.D), lse2 = nans(s.B * s.H);
    attn_fwd_finalize(st, view(out2, {s.B, 1, s.H, s.D}), view(lse2, {s.B, s.H, 1}));
    EXPECT_LE(test::decode_rel_error(out2, ref.out), kOutTol);
    EXPECT_LE(test::decode_lse_error(lse2, ref.lse), kLseTol);
  }
}

// A cache sharded in two (rows [0, N1) and [N1, Nk), as two ranks would hold it): the two partial states merged
// with attn_state_merge, then finalized, equal the whole cache's attention.
TEST(AttnDecodeCpu, MergedHalvesEqualWhole) {
  const DecodeShape s{2, 16, 4, 128, 1531, {1531, 600}};
  const int64_t N1 = 700, N2 = s.Nk - N1;
  Case c(s);
  const test::DecodeReference ref = test::decode_reference(s, c.q, c.k, c.v);
  // The halves as caches of their own: (B, N1 | N2, Hkv, D).
  std::vector<float> k1, v1, k2, v2;
  const int64_t row = s.Hkv * s.D;
  for (int64_t b = 0; b < s.B; ++b) {
    const auto at = [&](const std::vector<float>& x, int64_t j) { return x.begin() + (b * s.Nk + j) * row; };
    k1.insert(k1.end(), at(c.k, 0), at(c.k, N1)), v1.insert(v1.end(), at(c.v, 0), at(c.v, N1));
    k2.insert(k2.end(), at(c.k, N1), at(c.k, s.Nk)), v2.insert(v2.end(), at(c.v, N1), at(c.v, s.Nk));
  }
  std::vector<int32_t> len1(size_t(s.B)), len2(size_t(s.B));  // sequence 1 (600 rows) lies in the first half only
  for (int64_t b = 0; b < s.B; ++b)
    len1[size_t(b)] = std::min<int32_t>(s.lens[size_t(b)], int32_t(N1)),
    len2[size_t(b)] = s.lens[size_t(b)] - len1[size_t(b)];
  std::vector<float> work = decode_work(s, std::max(N1, N2));
  std::vector<float> acc1 = nans(s.B * s.H * s.D), m1 = nans(s.B * s.H), l1 = nans(s.B * s.H);
  std::vector<float> acc2 = nans(s.B * s.H * s.D), m2 = nans(s.B * s.H), l2 = nans(s.B * s.H);
  AttnState st1{view(acc1, {s.B, s.H, 1, s.D}), view(m1, {s.B, s.H, 1}), view(l1, {s.B, s.H, 1})};
  AttnState st2{view(acc2, {s.B, s.H, 1, s.D}), view(m2, {s.B, s.H, 1}), view(l2, {s.B, s.H, 1})};
  const Tensor tl1(len1.data(), DType::i32, Device::cpu(), {s.B}), tl2(len2.data(), DType::i32, Device::cpu(), {s.B});
  attn_decode_partial(c.tq(), view(k1, {s.B, N1, s.Hkv, s.D}), view(v1, {s.B, N1, s.Hkv, s.D}), tl1,
                      view(work, {int64_t(work.size())}), st1);
  attn_decode_partial(c.tq(), view(k2, {s.B, N2, s.Hkv, s.D}), view(v2, {s.B, N2, s.Hkv, s.D}), tl2,
                      view(work, {int64_t(work.size())}), st2);
  attn_state_merge(st1, st2);
  std::vector<float> out = nans(s.B * s.H * s.D), lse = nans(s.B * s.H);
  attn_fwd_finalize(st1, view(out, {s.B, 1, s.H, s.D}), view(lse, {s.B, s.H, 1}));
  EXPECT_LE(test::decode_rel_error(out, ref.out), kOutTol);
  EXPECT_LE(test::decode_lse_error(lse, ref.lse), kLseTol);

  // Merging an empty state (m = -inf) changes nothing; merging into an empty state copies the other.
  std::vector<float> acc0(acc1.size(), 0.f), m0(m1.size(), -INFINITY), l0(l1.size(), 0.f);
  AttnState empty{view(acc0, {s.B, s.H, 1, s.D}), view(m0, {s.B, s.H, 1}), view(l0, {s.B, s.H, 1})};
  const std::vector<float> acc_before = acc1, m_before = m1, l_before = l1;
  attn_state_merge(st1, empty);
  EXPECT_EQ(acc1, acc_before);
  EXPECT_EQ(m1, m_before);
  EXPECT_EQ(l1, l_before);
  attn_state_merge(empty, st1);
  EXPECT_EQ(acc0, acc1);
  EXPECT_EQ(m0, m1);
  EXPECT_EQ(l0, l1);
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AttnDecodeCpu, RefusesBadInputNamingIt) {
  Case c(DecodeShape{2, 4, 2, 64, 100, {100, 50}});
  const DecodeShape& s = c.s;
  std::vector<float> work = decode_work(s, s.Nk);
  std::vector<float> out = nans(s.B * s.H * s.D), lse = nans(s.B * s.H);
  const Tensor tw = view(work, {int64_t(work.size())}), to = view(out, {s.B, 1, s.H, s.D}), tlse = view(lse, {s.B, s.H, 1});
  std::vector<int32_t> too_long = {100, 101};
  const Tensor bad_len(too_long.data(), DType::i32, Device::cpu(), {s.B});
  expect_error([&] { attn_decode(c.tq(), c.tk(), c.tv(), bad_len, tw, to, tlse); }, "kv_len[1] = 101");
  expect_error([&] { attn_decode(c.tq(), c.tk(), c.tv(), Tensor{}, view(work, {7}), to, tlse); },
               "attn_decode_work_elems");
  expect_error([&] { attn_decode(view(c.q, {s.B, 2, s.H / 2, s.D}), c.tk(), c.tv(), Tensor{}, tw, to, tlse); },
               "expected (B,1,H,D)");
  std::vector<float> stale = work;  // a counter left non-zero (a workspace never zeroed, or used for another B or H)
  stale[size_t(attn_decode_counter_elems(s.B, s.H) - 1)] = 1.f;
  expect_error([&] { attn_decode(c.tq(), c.tk(), c.tv(), Tensor{}, view(stale, {int64_t(stale.size())}), to, tlse); },
               "arrival counters");
  std::vector<float> acc = nans(s.B * s.H * s.D), m = nans(s.B * s.H), l = nans(s.B * s.H);
  AttnState st{view(acc, {s.B, s.H, 1, s.D}), view(m, {s.B, s.H, 1}), view(l, {s.B, s.H, 1})};
  expect_error([&] { attn_decode_partial(c.tq(), c.tk(), c.tv(), Tensor{}, view(stale, {int64_t(stale.size())}), st); },
               "fill(work, 0.f)");
  EXPECT_TRUE(std::isnan(out[0])) << "a refused call wrote its output";
  EXPECT_TRUE(std::isnan(acc[0])) << "a refused call wrote its state";
}

}  // namespace
}  // namespace rt
