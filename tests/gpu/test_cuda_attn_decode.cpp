// The CUDA split-KV decode (kernels/cuda/attention/attn_decode.cu) and attn_state_merge against the fp64 reference
// of tests/unit/attn_decode_reference.h: cache lengths that are not a multiple of the 64-row split, GQA groups of
// 1, 4, 8, 16 and 20 (two CTAs' worth of query heads), B > 1 with ragged lengths (one of one row, one empty), head
// dims 64 and 128, and a 128K-row cache that takes the whole-GPU split count. Inputs are fresh every run (the seed
// is printed with any failure); outputs are NaN-poisoned before each call; any NaN fails.
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

void check_case(const DecodeShape& shape) {
  DecodeCase c(shape);
  const DecodeShape& s = c.s;
  SCOPED_TRACE(c.name());
  const DecodeReference ref = c.reference();
  Buffer work(gpu(), DType::f32, {attn_decode_work_elems(s.B, s.H, s.Hkv, s.D, s.Nk)});
  Buffer out(gpu(), DType::bf16, {s.B, 1, s.H, s.D}), lse(gpu(), DType::f32, {s.B, s.H, 1});
  poison(work), poison(out), poison(lse);
  attn_decode(c.q, c.k, c.v, c.len, work, out, lse);
  const std::vector<float> o = download(out), ls = download(lse);
  EXPECT_LE(decode_rel_error(o, ref.out), kOutTol) << "attn_decode out";
  EXPECT_LE(decode_lse_error(ls, ref.lse), kLseTol) << "attn_decode lse";

  // The partial state, finished by attn_fwd_finalize: the same attention.
  Buffer acc(gpu(), DType::f32, {s.B, s.H, 1, s.D}), m(gpu(), DType::f32, {s.B, s.H, 1}), l(gpu(), DType::f32, {s.B, s.H, 1});
  poison(work), poison(acc), poison(m), poison(l), poison(out), poison(lse);
  AttnState st{acc, m, l};
  attn_decode_partial(c.q, c.k, c.v, c.len, work, st);
  attn_fwd_finalize(st, out, lse);
  EXPECT_LE(decode_rel_error(download(out), ref.out), kOutTol) << "attn_decode_partial + finalize out";
  EXPECT_LE(decode_lse_error(download(lse), ref.lse), kLseTol) << "attn_decode_partial + finalize lse";
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
    Buffer work(gpu(), DType::f32, {attn_decode_work_elems(1, s.H, s.Hkv, s.D, std::max(N1, N2))});
    Buffer acc1(gpu(), DType::f32, {1, s.H, 1, s.D}), m1(gpu(), DType::f32, {1, s.H, 1}), l1(gpu(), DType::f32, {1, s.H, 1});
    Buffer acc2(gpu(), DType::f32, {1, s.H, 1, s.D}), m2(gpu(), DType::f32, {1, s.H, 1}), l2(gpu(), DType::f32, {1, s.H, 1});
    for (const Buffer* b : {&acc1, &m1, &l1, &acc2, &m2, &l2, &work}) poison(*b);
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

}  // namespace
}  // namespace rt::test
