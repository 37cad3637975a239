// The FP8 attention backward (kernels/attn_bwd_fp8.h) on the ring's block calls: Nq != Nk, the mask's q_offset /
// k_offset and row ranges, against the CPU op attn_bwd_block_fp8 (kernels/attn_fp8.h, the recipe's reference) on the
// same inputs:
//   * the dQ, dK, dV increments within 1e-2 relative RMS of the CPU op's (the same scale groups: Q / dO / K per
//     128-row block of the tensors, dS per tile clipped to the ranges; predicted ~1e-4..1e-3 from f32 reassociation
//     and a few flipped E4M3 codes; a wrong mask, group or offset gives O(1));
//   * rows outside the ranges keep their values bit for bit (dq rows outside [q_begin, q_end), dk / dv rows outside
//     [k_begin, k_end)); a fully masked (future) block leaves all three accumulators bit for bit unchanged;
//   * lse and delta of the query rows outside the range are NaN, so a kernel that lets them into a tile fails;
//   * the quantizer's codes and factors with Nq != Nk bit for bit against the host rule (fp8_attn_test_util.h).
// Cases: the cp = 2 and cp = 4 layouts of parallel/schedule/ring_schedule.cpp (contiguous: diagonal, strictly past
// with causal offsets, future; zigzag: k_end = n / 2 and q_begin = n / 2; striped: k_offset 1), Nq != Nk both ways,
// ranges that cut tiles mid-way (q_begin 64, k_end = Nk - 64), GQA and B = 2. Also: the predicate
// attn_bwd_fp8_cuda_supports (host only, runs without a device), documents refused.
// Fresh random inputs per case; the accumulators start from fresh random values (the op adds); the codes are
// poisoned before the quantizer; any NaN fails (rel_error is infinite). Skipped only without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attn_bwd_fp8.h"
#include "kernels/attn_fp8.h"
#include "kernels/attn_fwd_fp8.h"
#include "tests/gpu/attn_bwd_device_inputs.h"
#include "tests/gpu/fp8_attn_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kD = 128;

// One block call: q (B,Nq,H,D), k, v (B,Nk,Hkv,D), the mask.
struct BlockCase {
  const char* name;
  int64_t B, Nq, Nk, H, Hkv;
  AttnMask mask;
};

// The ranges of a mask with end = -1 resolved.
int64_t q_end_of(const BlockCase& c) { return c.mask.q_end < 0 ? c.Nq : c.mask.q_end; }
int64_t k_end_of(const BlockCase& c) { return c.mask.k_end < 0 ? c.Nk : c.mask.k_end; }

// Whether query i sees key j under the case's mask (ranges and causal offsets).
bool visible(const BlockCase& c, int64_t i, int64_t j) {
  if (i < c.mask.q_begin || i >= q_end_of(c) || j < c.mask.k_begin || j >= k_end_of(c)) return false;
  return !c.mask.causal || c.mask.k_offset + j <= c.mask.q_offset + i;
}

// Forward statistics of the bf16-valued inputs in fp64 over the visible pairs: lse and delta (B,H,Nq). Rows outside
// [q_begin, q_end) get NaN (the kernel must not read them into a product); rows in range without a visible key get
// lse -inf, delta 0.
void forward_stats(const BlockCase& c, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& dout, std::vector<float>& lse,
                   std::vector<float>& delta) {
  const int64_t group = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(kD));
  lse.assign(size_t(c.B * c.H * c.Nq), std::nanf(""));
  delta.assign(size_t(c.B * c.H * c.Nq), std::nanf(""));
  std::vector<double> p(static_cast<size_t>(c.Nk)), o(static_cast<size_t>(kD));  // (Nk) scores, (D) output row
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = c.mask.q_begin; i < q_end_of(c); ++i) {
        const float* qr = &q[size_t(((b * c.Nq + i) * c.H + h) * kD)];
        const float* dor = &dout[size_t(((b * c.Nq + i) * c.H + h) * kD)];
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Nk; ++j) {
          p[size_t(j)] = -INFINITY;
          if (!visible(c, i, j)) continue;
          const float* kr = &k[size_t(((b * c.Nk + j) * c.Hkv + h / group) * kD)];
          double dot = 0;
          for (int64_t d = 0; d < kD; ++d) dot += double(qr[d]) * double(kr[d]);
          p[size_t(j)] = dot * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        const size_t at = size_t((b * c.H + h) * c.Nq + i);
        if (mx == -INFINITY) {
          lse[at] = -INFINITY;
          delta[at] = 0.f;
          continue;
        }
        double l = 0;
        for (int64_t j = 0; j < c.Nk; ++j) l += p[size_t(j)] == -INFINITY ? 0.0 : std::exp(p[size_t(j)] - mx);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < c.Nk; ++j) {
          if (p[size_t(j)] == -INFINITY) continue;
          const double pj = std::exp(p[size_t(j)] - mx) / l;
          const float* vr = &v[size_t(((b * c.Nk + j) * c.Hkv + h / group) * kD)];
          for (int64_t d = 0; d < kD; ++d) o[size_t(d)] += pj * double(vr[d]);
        }
        double dl = 0;
        for (int64_t d = 0; d < kD; ++d) dl += double(dor[d]) * o[size_t(d)];
        lse[at] = float(mx + std::log(l));
        delta[at] = float(dl);
      }
}

// The device codes of a case (shapes: kernels/attn_bwd_fp8.h), poisoned.
struct BlockCodes {
  std::unique_ptr<Buffer> qt, qf, dot, dof, kt, kf;
  AttnFp8BwdCodes c;
  explicit BlockCodes(const BlockCase& s) {
    const int64_t qblk = s.Nq / 128, kblk = s.Nk / 128;
    qt = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.H, kD, s.Nq});
    qf = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.H, qblk});
    dot = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.H, kD, s.Nq});
    dof = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.H, qblk});
    kt = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.Hkv, kD, s.Nk});
    kf = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.Hkv, kblk});
    c = AttnFp8BwdCodes{qt->t(), qf->t(), dot->t(), dof->t(), kt->t(), kf->t()};
    for (const Tensor* t : {&c.qt, &c.dot, &c.kt}) poison_codes(*t);
    for (const Tensor* t : {&c.q_factor, &c.do_factor, &c.k_factor}) poison(*t);
  }
};

// out - init over the rows [r0, r1) of a (B, rows, heads, D) tensor (the other rows dropped).
std::vector<float> increment_rows(const std::vector<float>& out, const std::vector<float>& init, int64_t B,
                                  int64_t rows, int64_t heads, int64_t r0, int64_t r1) {
  std::vector<float> d;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t x = 0; x < heads * kD; ++x) {
        const size_t at = size_t((b * rows + r) * heads * kD + x);
        d.push_back(float(double(out[at]) - double(init[at])));
      }
  return d;
}
// The same rows of a tensor, unchanged.
std::vector<float> rows_of(const std::vector<float>& t, int64_t B, int64_t rows, int64_t heads, int64_t r0,
                           int64_t r1) {
  std::vector<float> d;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t x = 0; x < heads * kD; ++x) d.push_back(t[size_t((b * rows + r) * heads * kD + x)]);
  return d;
}
// How many elements of the rows outside [r0, r1) differ in their bits between out and init.
int64_t changed_outside(const std::vector<float>& out, const std::vector<float>& init, int64_t B, int64_t rows,
                        int64_t heads, int64_t r0, int64_t r1) {
  int64_t bad = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      if (r >= r0 && r < r1) continue;
      for (int64_t x = 0; x < heads * kD; ++x) {
        const size_t at = size_t((b * rows + r) * heads * kD + x);
        bad += float_bits(out[at]) != float_bits(init[at]);
      }
    }
  return bad;
}

// The quantizer with Nq != Nk, bit for bit against kernels/fp8.h's rule on the host: x (B,N,heads,D) into codes
// (B,heads,D,N) (row r of a block in column attn_fp8_vt_column_of_key(r) when permuted) and factors (B,heads,N/128).
void expect_codes(const std::vector<float>& x, int64_t B, int64_t N, int64_t heads, bool permute, const Tensor& codes,
                  const Tensor& factors, const char* what) {
  auto code_at = [&](int64_t b, int64_t h, int64_t blk, int64_t r, int64_t d) {
    return size_t(((b * heads + h) * kD + d) * N + blk * 128 + (permute ? attn_fp8_vt_column_of_key(r) : r));
  };
  std::vector<uint8_t> want_codes;
  std::vector<float> want_factors;
  host_quantize_row_blocks(x, B, N, heads, code_at, want_codes, want_factors);
  EXPECT_EQ(count_code_mismatches(download_codes(codes), want_codes), 0) << what << " codes";
  EXPECT_EQ(count_factor_mismatches(download(factors), want_factors), 0) << what << " factors";
}

// Whether any (query, key) pair of the case is visible.
bool any_visible(const BlockCase& c) {
  for (int64_t i = c.mask.q_begin; i < q_end_of(c); ++i)
    for (int64_t j = c.mask.k_begin; j < k_end_of(c); ++j)
      if (visible(c, i, j)) return true;
  return false;
}

void run_block_case(const BlockCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << ": B " << c.B << " Nq " << c.Nq << " Nk " << c.Nk << " H " << c.H
                                    << " Hkv " << c.Hkv << (c.mask.causal ? " causal" : " full") << " q_offset "
                                    << c.mask.q_offset << " k_offset " << c.mask.k_offset << " rows ["
                                    << c.mask.q_begin << "," << c.mask.q_end << ") x [" << c.mask.k_begin << ","
                                    << c.mask.k_end << ")");
  std::string why;
  ASSERT_TRUE(attn_bwd_fp8_cuda_supports(c.mask, c.Nq, c.Nk, kD, &why)) << why;
  const std::vector<float> q = bf16_rounded(random_vector(c.B * c.Nq * c.H * kD, seed));
  const std::vector<float> k = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * kD, seed + 1));
  const std::vector<float> v = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * kD, seed + 2));
  const std::vector<float> dout = bf16_rounded(random_vector(c.B * c.Nq * c.H * kD, seed + 3));
  std::vector<float> lse, delta;
  forward_stats(c, q, k, v, dout, lse, delta);
  const std::vector<float> dq0 = random_vector(c.B * c.Nq * c.H * kD, seed + 4, 1e-3f);
  const std::vector<float> dk0 = random_vector(c.B * c.Nk * c.Hkv * kD, seed + 5, 1e-3f);
  const std::vector<float> dv0 = random_vector(c.B * c.Nk * c.Hkv * kD, seed + 6, 1e-3f);

  // The CPU op on the same inputs, from zero accumulators.
  std::vector<float> qh = q, kh = k, vh = v, doh = dout, lseh = lse, deltah = delta;
  std::vector<float> dq_cpu(dq0.size(), 0.f), dk_cpu(dk0.size(), 0.f), dv_cpu(dv0.size(), 0.f);
  attn_bwd_block_fp8(host_view(qh, {c.B, c.Nq, c.H, kD}), host_view(kh, {c.B, c.Nk, c.Hkv, kD}),
                     host_view(vh, {c.B, c.Nk, c.Hkv, kD}), host_view(doh, {c.B, c.Nq, c.H, kD}),
                     host_view(lseh, {c.B, c.H, c.Nq}), host_view(deltah, {c.B, c.H, c.Nq}),
                     host_view(dq_cpu, {c.B, c.Nq, c.H, kD}), host_view(dk_cpu, {c.B, c.Nk, c.Hkv, kD}),
                     host_view(dv_cpu, {c.B, c.Nk, c.Hkv, kD}), c.mask);
  const int64_t qb = c.mask.q_begin, qe = q_end_of(c), kb = c.mask.k_begin, ke = k_end_of(c);
  const std::vector<float> dq_ref = rows_of(dq_cpu, c.B, c.Nq, c.H, qb, qe);
  const std::vector<float> dk_ref = rows_of(dk_cpu, c.B, c.Nk, c.Hkv, kb, ke);
  const std::vector<float> dv_ref = rows_of(dv_cpu, c.B, c.Nk, c.Hkv, kb, ke);
  const bool any = any_visible(c);

  const AttnBwdDeviceInputs in(c.B, c.Nq, c.Nk, c.H, c.Hkv, kD);
  Buffer bdq(gpu(), DType::f32, {c.B, c.Nq, c.H, kD}), bdk(gpu(), DType::f32, {c.B, c.Nk, c.Hkv, kD}),
      bdv(gpu(), DType::f32, {c.B, c.Nk, c.Hkv, kD});
  in.fill(q, k, v, dout, lse, delta);
  BlockCodes codes(c);
  attn_bwd_fp8_quantize(in.q, in.k, in.dout, codes.c);
  expect_codes(q, c.B, c.Nq, c.H, true, codes.c.qt, codes.c.q_factor, "Q^T");
  expect_codes(dout, c.B, c.Nq, c.H, true, codes.c.dot, codes.c.do_factor, "dO^T");
  expect_codes(k, c.B, c.Nk, c.Hkv, false, codes.c.kt, codes.c.k_factor, "K^T");

  upload(bdq, dq0);  // the op adds
  upload(bdk, dk0);
  upload(bdv, dv0);
  attn_bwd_fp8_from_codes(in.q, in.k, in.v, in.dout, in.lse, in.delta, codes.c, c.mask, bdq, bdk, bdv);
  const std::vector<float> dq = download(bdq), dk = download(bdk), dv = download(bdv);
  EXPECT_EQ(changed_outside(dq, dq0, c.B, c.Nq, c.H, qb, qe), 0) << "dq rows outside the query range changed";
  EXPECT_EQ(changed_outside(dk, dk0, c.B, c.Nk, c.Hkv, kb, ke), 0) << "dk rows outside the key range changed";
  EXPECT_EQ(changed_outside(dv, dv0, c.B, c.Nk, c.Hkv, kb, ke), 0) << "dv rows outside the key range changed";
  if (!any) {  // a future block: nothing at all changes
    EXPECT_EQ(count_factor_mismatches(dq, dq0), 0) << "dq changed by a fully masked block";
    EXPECT_EQ(count_factor_mismatches(dk, dk0), 0) << "dk changed by a fully masked block";
    EXPECT_EQ(count_factor_mismatches(dv, dv0), 0) << "dv changed by a fully masked block";
    std::printf("[ fp8 bwd block ] %s: fully masked, outputs unchanged\n", c.name);
    return;
  }
  const std::vector<float> gq = increment_rows(dq, dq0, c.B, c.Nq, c.H, qb, qe);
  const std::vector<float> gk = increment_rows(dk, dk0, c.B, c.Nk, c.Hkv, kb, ke);
  const std::vector<float> gv = increment_rows(dv, dv0, c.B, c.Nk, c.Hkv, kb, ke);
  const double eq = rel_error(gq, dq_ref), ek = rel_error(gk, dk_ref), ev = rel_error(gv, dv_ref);
  std::printf("[ fp8 bwd block ] %s: vs CPU op dq %.3e dk %.3e dv %.3e\n", c.name, eq, ek, ev);
  EXPECT_LE(eq, 1e-2) << "dQ vs the CPU op: " << worst_mismatch(gq, dq_ref);
  EXPECT_LE(ek, 1e-2) << "dK vs the CPU op: " << worst_mismatch(gk, dk_ref);
  EXPECT_LE(ev, 1e-2) << "dV vs the CPU op: " << worst_mismatch(gv, dv_ref);
}

// The mask of ring_block_plan (parallel/schedule/ring_schedule.cpp) for rank r receiving rank s's keys, n rows a
// rank, written out here so the test reads alone.
AttnMask contiguous_mask(int r, int s, int64_t n) {  // causal with the global offsets of both blocks
  AttnMask m;
  m.causal = true;
  m.q_offset = r * n;
  m.k_offset = s * n;
  return m;
}
AttnMask zigzag_mask(int r, int s, int64_t n) {
  AttnMask m;
  if (s == r) m.causal = true;
  else if (s < r) m.k_end = n / 2;
  else m.q_begin = n / 2;
  return m;
}
AttnMask striped_mask(int r, int s) {
  AttnMask m;
  m.causal = true;
  m.k_offset = s > r ? 1 : 0;
  return m;
}

TEST(CudaAttnBwdFp8Blocks, SupportsPredicate) {  // host only: no device needed
  std::string why;
  AttnMask whole;
  EXPECT_TRUE(attn_bwd_fp8_cuda_supports(whole, 256, 256, 128, &why)) << why;
  AttnMask ring = contiguous_mask(1, 0, 256);
  ring.q_begin = 64;
  ring.k_end = 192;
  EXPECT_TRUE(attn_bwd_fp8_cuda_supports(ring, 256, 512, 128, &why)) << why;
  EXPECT_FALSE(attn_bwd_fp8_cuda_supports(whole, 256, 256, 64, &why));
  EXPECT_NE(why.find("head dim"), std::string::npos) << why;
  EXPECT_FALSE(attn_bwd_fp8_cuda_supports(whole, 200, 256, 128, &why));
  EXPECT_NE(why.find("multiples of 128"), std::string::npos) << why;
  AttnMask outside;
  outside.k_end = 300;
  EXPECT_FALSE(attn_bwd_fp8_cuda_supports(outside, 256, 256, 128, &why));
  EXPECT_NE(why.find("outside"), std::string::npos) << why;
  std::vector<int64_t> pos(256, 0);
  AttnMask docs;
  docs.docs.q_pos = docs.docs.q_doc_start = docs.docs.k_pos = pos.data();
  docs.docs.q_stride = docs.docs.k_stride = 256;
  EXPECT_FALSE(attn_bwd_fp8_cuda_supports(docs, 256, 256, 128, &why));
  EXPECT_NE(why.find("documents"), std::string::npos) << why;
  EXPECT_FALSE(attn_bwd_fp8_cuda_supports(docs, 256, 256, 128, nullptr));
}

TEST(CudaAttnBwdFp8Blocks, ContiguousCp2AndCp4) {
  RT_REQUIRE_CUDA();
  const int64_t n = 384;  // rows a rank (3 tiles)
  run_block_case({"cp2 diagonal r1 s1", 2, n, n, 4, 2, contiguous_mask(1, 1, n)}, 301);
  run_block_case({"cp2 past r1 s0", 2, n, n, 4, 2, contiguous_mask(1, 0, n)}, 302);
  run_block_case({"cp2 future r0 s1", 2, n, n, 4, 2, contiguous_mask(0, 1, n)}, 303);
  run_block_case({"cp4 diagonal r3 s3", 1, n, n, 4, 1, contiguous_mask(3, 3, n)}, 304);
  run_block_case({"cp4 past r3 s1", 1, n, n, 4, 1, contiguous_mask(3, 1, n)}, 305);
  run_block_case({"cp4 future r1 s2", 1, n, n, 4, 1, contiguous_mask(1, 2, n)}, 306);
}

TEST(CudaAttnBwdFp8Blocks, ZigzagCp2AndCp4) {
  RT_REQUIRE_CUDA();
  const int64_t n = 512;  // two chunks of 256 a rank
  run_block_case({"zigzag cp2 diagonal", 2, n, n, 4, 2, zigzag_mask(0, 0, n)}, 311);
  run_block_case({"zigzag cp2 s < r (k_end n/2)", 2, n, n, 4, 2, zigzag_mask(1, 0, n)}, 312);
  run_block_case({"zigzag cp2 s > r (q_begin n/2)", 2, n, n, 4, 2, zigzag_mask(0, 1, n)}, 313);
  run_block_case({"zigzag cp4 s < r", 1, n, n, 2, 2, zigzag_mask(3, 1, n)}, 314);
  run_block_case({"zigzag cp4 s > r", 1, n, n, 2, 2, zigzag_mask(1, 3, n)}, 315);
}

TEST(CudaAttnBwdFp8Blocks, StripedCp2AndCp4) {
  RT_REQUIRE_CUDA();
  const int64_t n = 256;
  run_block_case({"striped cp2 s <= r", 2, n, n, 4, 2, striped_mask(1, 0)}, 321);
  run_block_case({"striped cp4 s > r (k_offset 1)", 2, n, n, 4, 2, striped_mask(1, 3)}, 322);
}

TEST(CudaAttnBwdFp8Blocks, UnequalLengthsAndMidTileRanges) {
  RT_REQUIRE_CUDA();
  AttnMask a;  // 256 queries at the end of 512 keys: the last two tiles of a causal diagonal
  a.causal = true;
  a.q_offset = 256;
  run_block_case({"Nq 256 < Nk 512, causal q_offset 256", 2, 256, 512, 4, 2, a}, 331);
  AttnMask b;  // 512 queries x 256 keys, the keys in the middle of the queries' span
  b.causal = true;
  b.k_offset = 128;
  run_block_case({"Nq 512 > Nk 256, causal k_offset 128", 1, 512, 256, 4, 1, b}, 332);
  run_block_case({"Nq 384 > Nk 128, full", 2, 384, 128, 2, 1, AttnMask{}}, 333);
  AttnMask cut;  // ranges that cut the first query tile and the last key tile in half
  cut.causal = true;
  cut.q_begin = 64;
  cut.k_end = 512 - 64;
  run_block_case({"mid-tile ranges, causal", 2, 512, 512, 4, 2, cut}, 334);
  AttnMask cut_full = cut;
  cut_full.causal = false;
  cut_full.k_begin = 192;
  cut_full.k_end = 384 - 64;  // the last key tile of the 384 cut in half (cut's 448 lies past Nk)
  cut_full.q_end = 448;
  run_block_case({"mid-tile ranges, full, Nq != Nk", 1, 512, 384, 4, 2, cut_full}, 335);
  AttnMask cut_off = cut;  // mid-tile ranges with offsets and Nq != Nk
  cut_off.q_offset = 300;
  cut_off.k_offset = 0;
  cut_off.k_end = 640 - 64;
  run_block_case({"mid-tile ranges, causal, offsets, Nq 512 Nk 640", 2, 512, 640, 4, 1, cut_off}, 336);
}

TEST(CudaAttnBwdFp8Blocks, RefusesDocuments) {
  RT_REQUIRE_CUDA();
  const BlockCase c{"refusals", 1, 256, 256, 2, 2, contiguous_mask(1, 0, 256)};
  Buffer q(gpu(), DType::bf16, {1, 256, 2, kD}), lse(gpu(), DType::f32, {1, 2, 256}),
      acc(gpu(), DType::f32, {1, 256, 2, kD});
  BlockCodes codes(c);
  AttnMask docs;
  std::vector<int64_t> pos(256, 0);
  docs.docs.q_pos = docs.docs.q_doc_start = docs.docs.k_pos = pos.data();
  docs.docs.q_stride = docs.docs.k_stride = 256;
  try {
    attn_bwd_fp8_from_codes(q, q, q, q, lse, lse, codes.c, docs, acc, acc, acc);
    ADD_FAILURE() << "documents were not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("documents"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rt::test
