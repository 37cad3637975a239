// attn_fwd_merge on CUDA (kernels/cuda/attention/attn_fwd_merge.cu) against the CPU op on the same values, at the
// gather scheme's shape (d128, 16 heads), out in bf16 (the model's) and in f32: fresh random results, rows with no key
// on one side (lse -inf; that side's out poisoned with NaN: it must not be read) or on both (out 0 and lse -inf
// kept), rows outside the merged range untouched bit for bit. Skips without a CUDA device.
#include <cmath>

#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kB = 2, kNq = 300, kH = 16, kD = 128, kM = 173, kQ0 = 61;

struct MergeCase {
  std::vector<float> out, lse, out2, lse2;  // (B,Nq,H,D), (B,H,Nq), (B,M,H,D), (B,H,M)
};

MergeCase make_case(uint64_t seed, bool bf16_out) {
  MergeCase c{random_vector(kB * kNq * kH * kD, seed), random_vector(kB * kH * kNq, seed + 1, 3.f),
              random_vector(kB * kM * kH * kD, seed + 2), random_vector(kB * kH * kM, seed + 3, 3.f)};
  if (bf16_out) c.out = bf16_rounded(c.out);
  c.out2 = bf16_rounded(c.out2);  // the gathered call's out is bf16 on the GPU
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < kNq; ++i) {
        const int64_t j = i - kQ0;  // out2's row, when in range
        const bool in = j >= 0 && j < kM;
        const bool none1 = i % 5 == 1, none2 = in && (j % 7 == 3 || (i % 5 == 1 && j % 2 == 0));
        float* o = &c.out[size_t(((b * kNq + i) * kH + h) * kD)];
        if (none1) {
          c.lse[size_t((b * kH + h) * kNq + i)] = -INFINITY;
          const bool both = !in || none2;
          for (int64_t e = 0; e < kD; ++e) o[e] = both ? 0.f : NAN;  // weight 0 unless both are empty
        }
        if (none2) {
          c.lse2[size_t((b * kH + h) * kM + j)] = -INFINITY;
          for (int64_t e = 0; e < kD; ++e) c.out2[size_t(((b * kM + j) * kH + h) * kD + e)] = NAN;
        }
      }
  return c;
}

void check_merge(DType out_dtype, uint64_t seed) {
  const bool bf16 = out_dtype == DType::bf16;
  MergeCase c = make_case(seed, bf16);
  std::vector<float> ref_out = c.out, ref_lse = c.lse, out2 = c.out2, lse2 = c.lse2;
  RT_CPU_REFERENCE(attn_fwd_merge(host_view(ref_out, {kB, kNq, kH, kD}), host_view(ref_lse, {kB, kH, kNq}),
                                  host_view(out2, {kB, kM, kH, kD}), host_view(lse2, {kB, kH, kM}), kQ0));
  Buffer out(gpu(), out_dtype, {kB, kNq, kH, kD}), lse(gpu(), DType::f32, {kB, kH, kNq});
  Buffer g_out2(gpu(), DType::bf16, {kB, kM, kH, kD}), g_lse2(gpu(), DType::f32, {kB, kH, kM});
  poison(out);
  poison(lse);
  upload(out, c.out);
  upload(lse, c.lse);
  upload(g_out2, c.out2);
  upload(g_lse2, c.lse2);
  attn_fwd_merge(out, lse, g_out2, g_lse2, kQ0);
  std::vector<float> got_out = download(out), got_lse = download(lse);
  // The rows that were NaN on input and not merged over keep their NaN on both sides; compare the rest.
  int merged = 0, one_side = 0, both = 0;
  std::vector<float> a, b;  // merged rows' out, GPU and CPU
  for (int64_t bb = 0; bb < kB; ++bb)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < kNq; ++i) {
        const int64_t l = (bb * kH + h) * kNq + i, o = ((bb * kNq + i) * kH + h) * kD;
        const bool in = i >= kQ0 && i < kQ0 + kM;
        if (std::isinf(ref_lse[size_t(l)]) || std::isinf(got_lse[size_t(l)])) {
          ASSERT_EQ(got_lse[size_t(l)], ref_lse[size_t(l)]) << "lse at b " << bb << " h " << h << " row " << i;
          both += in;
        } else {
          ASSERT_NEAR(got_lse[size_t(l)], ref_lse[size_t(l)], 1e-5 * (1 + std::fabs(ref_lse[size_t(l)])))
              << "lse at b " << bb << " h " << h << " row " << i;
        }
        for (int64_t e = 0; e < kD; ++e) {
          const float g = got_out[size_t(o + e)], r = ref_out[size_t(o + e)];
          if (!in) {  // untouched: the input bits (NaN where the input was poisoned)
            ASSERT_TRUE(std::isnan(g) ? std::isnan(c.out[size_t(o + e)]) : g == c.out[size_t(o + e)])
                << "row " << i << " outside the range changed";
            continue;
          }
          ASSERT_FALSE(std::isnan(g) || std::isnan(r)) << "NaN at b " << bb << " h " << h << " row " << i;
          a.push_back(g);
          b.push_back(r);
        }
        if (in) {
          ++merged;
          const bool n1 = std::isinf(c.lse[size_t(l)]), n2 = std::isinf(c.lse2[size_t((bb * kH + h) * kM + i - kQ0)]);
          one_side += n1 != n2;
        }
      }
  ASSERT_GT(one_side, 0);
  ASSERT_GT(both, 0);
  ASSERT_EQ(merged, kB * kH * kM);
  EXPECT_CLOSE(a, b, bf16 ? 1e-2 : 1e-5);
}

TEST(CudaAttnFwdMerge, MatchesCpuWithBf16Out) {
  RT_REQUIRE_CUDA();
  check_merge(DType::bf16, 700);
}

TEST(CudaAttnFwdMerge, MatchesCpuWithF32Out) {
  RT_REQUIRE_CUDA();
  check_merge(DType::f32, 710);
}

}  // namespace
}  // namespace rt::test
