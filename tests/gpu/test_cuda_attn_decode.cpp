// The CUDA split-KV decode (kernels/cuda/attention/attn_decode.cu) and attn_state_merge against the fp64 reference
// of tests/unit/attn_decode_reference.h: cache lengths that are not a multiple of the 64-row split, GQA groups of
// 1, 4, 8, 16 and 20 (two CTAs' worth of query heads), B > 1 with ragged lengths (one of one row, one empty), head
// dims 64 and 128, a 128K-row cache that takes the whole-GPU split count, and back-to-back calls of other lengths
// on one workspace (the kernel's arrival counters are reset by each call's last CTAs). Inputs are fresh every run
// (the seed is printed with any failure); outputs and the workspace's partial states are NaN-poisoned before each
// call, its counters zeroed once; any NaN fails, and so does a counter left non-zero by a call.
// Tolerances: out 1e-2 relative norm (P and out in bf16), lse 2e-3 absolute (fp32 scores of bf16 inputs).
#include <random>

#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/attn_decode_reference.h"

namespace rt::test {
namespace {

constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 2e-3;

// Seeded, roughly unit-variance bf16 values (splitmix64 -> uniform in [-1.7, 1.7]); fast enough for 10^8 values.
std::vector<uint16_t> hash_bf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (uint64_t(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
    z ^= z >> 29;
    out[size_t(i)] = float_to_bf16((float(z >> 40) / float(1 << 24) * 2.f - 1.f) * 1.7f);
  }
  return out;
}
std::vector<float> to_float(const std::vector<uint16_t>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = bf16_to_float(x[i]);
  return f;
}
void upload_bf16(const Tensor& dst, std::vector<uint16_t>& src) {
  copy_cast(dst, Tensor(src.data(), DType::bf16, Device::cpu(), {int64_t(src.size())}));
}

// One case's inputs on the host (bf16 bits and their float values) and on the GPU.
struct DecodeCase {
  DecodeShape s;
  uint64_t seed;
  std::vector<uint16_t> q16, k16, v16;
  Buffer q, k, v, len;  // q (B,1,H,D), k and v (B,Nk,Hkv,D) bf16, len (B) i32
  explicit DecodeCase(DecodeShape shape)
      : s(std::move(shape)), seed(std::random_device{}()),
        q16(hash_bf16(s.B * s.H * s.D, seed)), k16(hash_bf16(s.B * s.Nk * s.Hkv * s.D, seed + 1)),
        v16(hash_bf16(s.B * s.Nk * s.Hkv * s.D, seed + 2)),
        q(gpu(), DType::bf16, {s.B, 1, s.H, s.D}), k(gpu(), DType::bf16, {s.B, s.Nk, s.Hkv, s.D}),
        v(gpu(), DType::bf16, {s.B, s.Nk, s.Hkv, s.D}), len(gpu(), DType::i32, {s.B}) {
    upload_bf16(q, q16);
    upload_bf16(k, k16);
    upload_bf16(v, v16);
    upload_i32(len, s.lens);
  }
  DecodeReference reference() const { return decode_reference(s, to_float(q16), to_float(k16), to_float(v16)); }
  std::string name() const {
    return "B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " Hkv=" + std::to_string(s.Hkv) + " D=" +
           std::to_string(s.D) + " Nk=" + std::to_string(s.Nk) + " seed=" + std::to_string(seed);
  }
};

// A decode workspace for calls of B sequences and H query heads: the arrival counters at its front
// (attn_decode_counter_elems) and the partial states after them.
struct DecodeWork {
  int64_t B, H;
  Buffer buf;
  DecodeWork(int64_t b, int64_t h, int64_t elems) : B(b), H(h), buf(gpu(), DType::f32, {elems}) {}
  Tensor counters() const { return buf.t().slice(0, attn_decode_counter_elems(B, H)); }
  Tensor partials() const { return buf.t().slice(attn_decode_counter_elems(B, H), buf.t().numel()); }
  void zero_once() { poison(buf), fill(counters(), 0.f); }  // as a caller sets it up (kernels/attention.h)
  void poison_partials() { poison(partials()); }             // the kernel must write every partial it reads
  void expect_counters_zero(const std::string& after) const {  // every call leaves them zero
    const std::vector<float> c = download(counters());
    for (size_t i = 0; i < c.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &c[i], 4);
      if (bits != 0) {
        ADD_FAILURE() << "arrival counter " << i << " is " << bits << " after " << after;
        return;
      }
    }
  }
  operator Tensor() const { return buf.t(); }
};

// attn_decode, then attn_decode_partial + attn_fwd_finalize, on one workspace zeroed once.
void check_case(const DecodeShape& shape) {
  DecodeCase c(shape);
  const DecodeShape& s = c.s;
  SCOPED_TRACE(c.name());
  const DecodeReference ref = c.reference();
  DecodeWork work(s.B, s.H, attn_decode_work_elems(s.B, s.H, s.Hkv, s.D, s.Nk));
  work.zero_once();
  Buffer out(gpu(), DType::bf16, {s.B, 1, s.H, s.D}), lse(gpu(), DType::f32, {s.B, s.H, 1});
  poison(out), poison(lse);
  attn_decode(c.q, c.k, c.v, c.len, work, out, lse);
  const std::vector<float> o = download(out), ls = download(lse);
  EXPECT_LE(decode_rel_error(o, ref.out), kOutTol) << "attn_decode out";
  EXPECT_LE(decode_lse_error(ls, ref.lse), kLseTol) << "attn_decode lse";
  work.expect_counters_zero("attn_decode");

  // The partial state, finished by attn_fwd_finalize: the same attention.
  Buffer acc(gpu(), DType::f32, {s.B, s.H, 1, s.D}), m(gpu(), DType::f32, {s.B, s.H, 1}), l(gpu(), DType::f32, {s.B, s.H, 1});
  work.poison_partials(), poison(acc), poison(m), poison(l), poison(out), poison(lse);
  AttnState st{acc, m, l};
  attn_decode_partial(c.q, c.k, c.v, c.len, work, st);
  attn_fwd_finalize(st, out, lse);
  EXPECT_LE(decode_rel_error(download(out), ref.out), kOutTol) << "attn_decode_partial + finalize out";
  EXPECT_LE(decode_lse_error(download(lse), ref.lse), kLseTol) << "attn_decode_partial + finalize lse";
  work.expect_counters_zero("attn_decode_partial");
}

TEST(CudaAttnDecode, Group1Dim64) {
  RT_REQUIRE_CUDA();
  check_case({1, 8, 8, 64, 1000, {1000}});
}
TEST(CudaAttnDecode, Group4Dim128RaggedBatch) {
  RT_REQUIRE_CUDA();
  check_case({3, 32, 8, 128, 4099, {4099, 1, 2500}});
}
TEST(CudaAttnDecode, Group8Dim64WithEmptySequence) {
  RT_REQUIRE_CUDA();
  check_case({2, 16, 2, 64, 7777, {7777, 0}});
}
TEST(CudaAttnDecode, Group16And20Dim128) {
  RT_REQUIRE_CUDA();
  check_case({2, 32, 2, 128, 20011, {20011, 13}});
  check_case({1, 40, 2, 128, 3001, {3001}});  // 20 query heads per K/V head: two CTAs of heads
}
TEST(CudaAttnDecode, LongCache128kGroup4) {
  RT_REQUIRE_CUDA();
  check_case({1, 32, 8, 128, 131072 + 37, {131072 + 37}});
}

// A cache sharded in two (rows [0, N1) and [N1, Nk), as two ranks hold it): the partial states merged by
// attn_state_merge on the GPU, then finalized, equal the whole cache's attention.
TEST(CudaAttnDecode, MergedHalvesEqualWhole) {
  RT_REQUIRE_CUDA();
  for (const int64_t D : {int64_t(64), int64_t(128)}) {
    const int64_t Nk = 10007, N1 = 3333, N2 = Nk - N1;
    DecodeCase c({1, 32, 8, D, Nk, {int32_t(Nk)}});
    const DecodeShape& s = c.s;
    SCOPED_TRACE(c.name());
    const DecodeReference ref = c.reference();
    const int64_t row_elems = s.Hkv * s.D;  // one cache row
    auto half = [&](const Buffer& kv, int64_t first, int64_t rows) {  // (1, rows, Hkv, D) view
      return Tensor(kv.t().ptr<uint16_t>() + first * row_elems, DType::bf16, gpu(), {1, rows, s.Hkv, s.D});
    };
    DecodeWork work(1, s.H, attn_decode_work_elems(1, s.H, s.Hkv, s.D, std::max(N1, N2)));
    work.zero_once();
    Buffer acc1(gpu(), DType::f32, {1, s.H, 1, s.D}), m1(gpu(), DType::f32, {1, s.H, 1}), l1(gpu(), DType::f32, {1, s.H, 1});
    Buffer acc2(gpu(), DType::f32, {1, s.H, 1, s.D}), m2(gpu(), DType::f32, {1, s.H, 1}), l2(gpu(), DType::f32, {1, s.H, 1});
    for (const Buffer* b : {&acc1, &m1, &l1, &acc2, &m2, &l2}) poison(*b);
    AttnState st1{acc1, m1, l1}, st2{acc2, m2, l2};
    attn_decode_partial(c.q, half(c.k, 0, N1), half(c.v, 0, N1), Tensor{}, work, st1);
    attn_decode_partial(c.q, half(c.k, N1, N2), half(c.v, N1, N2), Tensor{}, work, st2);
    attn_state_merge(st1, st2);
    Buffer out(gpu(), DType::bf16, {1, 1, s.H, s.D}), lse(gpu(), DType::f32, {1, s.H, 1});
    poison(out), poison(lse);
    attn_fwd_finalize(st1, out, lse);
    EXPECT_LE(decode_rel_error(download(out), ref.out), kOutTol);
    EXPECT_LE(decode_lse_error(download(lse), ref.lse), kLseTol);
  }
}

// Back-to-back calls on one workspace, zeroed once: caches of other lengths (so other split counts, down to one
// split, which merges nothing) and other ragged lengths, attn_decode and attn_decode_partial in turn. Each call must
// find the counters at zero (the last CTA of every head block resets its own) and leave them so.
TEST(CudaAttnDecode, BackToBackCallsOfOtherLengthsShareTheWorkspace) {
  RT_REQUIRE_CUDA();
  {  // B 1: prefixes of one cache (rows [0, n) of a (1, Nk, Hkv, D) cache are a (1, n, Hkv, D) cache)
    const int64_t Nk = 20000 + 37;
    DecodeCase c({1, 32, 8, 128, Nk, {int32_t(Nk)}});
    SCOPED_TRACE(c.name());
    const DecodeShape& s = c.s;
    DecodeWork work(1, s.H, attn_decode_work_elems(1, s.H, s.Hkv, s.D, Nk));
    work.zero_once();
    const std::vector<float> qf = to_float(c.q16), kf = to_float(c.k16), vf = to_float(c.v16);
    const int64_t row_elems = s.Hkv * s.D;  // one cache row
    int call = 0;
    for (const int64_t n : {Nk, int64_t(3001), int64_t(130), Nk, int64_t(64), int64_t(1), int64_t(4099)}) {
      SCOPED_TRACE("call " + std::to_string(call) + ": a cache of " + std::to_string(n) + " rows");
      const DecodeShape sn{1, s.H, s.Hkv, s.D, n, {int32_t(n)}};
      const DecodeReference ref = decode_reference(
          sn, qf, std::vector<float>(kf.begin(), kf.begin() + n * row_elems),
          std::vector<float>(vf.begin(), vf.begin() + n * row_elems));
      const Tensor k_pre(c.k.t().ptr<uint16_t>(), DType::bf16, gpu(), {1, n, s.Hkv, s.D});
      const Tensor v_pre(c.v.t().ptr<uint16_t>(), DType::bf16, gpu(), {1, n, s.Hkv, s.D});
      Buffer out(gpu(), DType::bf16, {1, 1, s.H, s.D}), lse(gpu(), DType::f32, {1, s.H, 1});
      poison(out), poison(lse), work.poison_partials();
      if (call % 2 == 0) {
        attn_decode(c.q, k_pre, v_pre, Tensor{}, work, out, lse);
      } else {
        Buffer acc(gpu(), DType::f32, {1, s.H, 1, s.D}), m(gpu(), DType::f32, {1, s.H, 1}), l(gpu(), DType::f32, {1, s.H, 1});
        poison(acc), poison(m), poison(l);
        AttnState st{acc, m, l};
        attn_decode_partial(c.q, k_pre, v_pre, Tensor{}, work, st);
        attn_fwd_finalize(st, out, lse);
      }
      EXPECT_LE(decode_rel_error(download(out), ref.out), kOutTol) << (call % 2 == 0 ? "attn_decode" : "partial");
      EXPECT_LE(decode_lse_error(download(lse), ref.lse), kLseTol) << (call % 2 == 0 ? "attn_decode" : "partial");
      work.expect_counters_zero("call " + std::to_string(call));
      ++call;
    }
  }
  {  // B 3, group 8, d 64: one cache, other kv_len per call (an empty sequence in two of them)
    DecodeCase c({3, 16, 2, 64, 4099, {4099, 1, 2500}});
    SCOPED_TRACE(c.name());
    const DecodeShape& s = c.s;
    DecodeWork work(s.B, s.H, attn_decode_work_elems(s.B, s.H, s.Hkv, s.D, s.Nk));
    work.zero_once();
    const std::vector<float> qf = to_float(c.q16), kf = to_float(c.k16), vf = to_float(c.v16);
    int call = 0;
    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{4099, 1, 2500}, std::vector<int32_t>{0, 4099, 64},
                                             std::vector<int32_t>{4099, 4099, 0}, std::vector<int32_t>{65, 63, 4098}}) {
      SCOPED_TRACE("call " + std::to_string(call) + ": lengths " + std::to_string(lens[0]) + ", " +
                   std::to_string(lens[1]) + ", " + std::to_string(lens[2]));
      DecodeShape sl = s;
      sl.lens = lens;
      const DecodeReference ref = decode_reference(sl, qf, kf, vf);
      std::vector<int32_t> lens_copy = lens;
      upload_i32(c.len, lens_copy);
      Buffer out(gpu(), DType::bf16, {s.B, 1, s.H, s.D}), lse(gpu(), DType::f32, {s.B, s.H, 1});
      poison(out), poison(lse), work.poison_partials();
      if (call % 2 == 0) {
        attn_decode(c.q, c.k, c.v, c.len, work, out, lse);
      } else {
        Buffer acc(gpu(), DType::f32, {s.B, s.H, 1, s.D}), m(gpu(), DType::f32, {s.B, s.H, 1}), l(gpu(), DType::f32, {s.B, s.H, 1});
        poison(acc), poison(m), poison(l);
        AttnState st{acc, m, l};
        attn_decode_partial(c.q, c.k, c.v, c.len, work, st);
        attn_fwd_finalize(st, out, lse);
      }
      EXPECT_LE(decode_rel_error(download(out), ref.out), kOutTol) << (call % 2 == 0 ? "attn_decode" : "partial");
      EXPECT_LE(decode_lse_error(download(lse), ref.lse), kLseTol) << (call % 2 == 0 ? "attn_decode" : "partial");
      work.expect_counters_zero("call " + std::to_string(call));
      ++call;
    }
  }
}

// A workspace whose counters were never zeroed (here: NaN bits, far above any split count) cannot give a silent
// stale answer: every query head of a block that splits its cache reads NaN.
TEST(CudaAttnDecode, UnzeroedWorkspaceGivesNaNNotAStaleAnswer) {
  RT_REQUIRE_CUDA();
  DecodeCase c({1, 32, 8, 128, 5000, {5000}});  // 5000 rows: 27 splits per K/V head on an H100 / H200
  const DecodeShape& s = c.s;
  DecodeWork work(s.B, s.H, attn_decode_work_elems(s.B, s.H, s.Hkv, s.D, s.Nk));
  poison(work);  // counters included
  Buffer out(gpu(), DType::bf16, {s.B, 1, s.H, s.D}), lse(gpu(), DType::f32, {s.B, s.H, 1});
  fill(out, 0.f), fill(lse, 0.f);
  attn_decode(c.q, c.k, c.v, c.len, work, out, lse);
  const std::vector<float> o = download(out), ls = download(lse);
  for (size_t i = 0; i < ls.size(); ++i) EXPECT_TRUE(std::isnan(ls[i])) << "lse[" << i << "] = " << ls[i];
  for (size_t i = 0; i < o.size(); i += size_t(s.D)) EXPECT_TRUE(std::isnan(o[i])) << "out[" << i << "] = " << o[i];
}

}  // namespace
}  // namespace rt::test
