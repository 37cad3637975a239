// CUDA elementwise ops and copies against their CPU versions (rt::cpu through the dispatcher) on random
// inputs. Tolerances (||out-ref||/||ref||): f32 paths 1e-6 (same formula, float rounding only), transcendental
// f32 paths 1e-5 (fast exp/tanh), bf16 outputs 8e-3 (one bf16 rounding, 2^-9 relative).
#include <cstring>

#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

TEST(CudaCopy, RoundTripsAndCastsExactly) {
  RT_REQUIRE_CUDA();
  const int64_t n = 10007;
  std::vector<float> x = random_vector(n, 1);
  Buffer d32(gpu(), DType::f32, {n}), d16(gpu(), DType::bf16, {n}), d32b(gpu(), DType::f32, {n});
  poison(d32); poison(d16); poison(d32b);
  upload(d32, x);                       // host f32 -> device f32 (memcpy)
  EXPECT_EQ(download(d32), x);          // device f32 -> host f32
  copy_cast(d16.t(), d32.t());          // device f32 -> device bf16 (kernel)
  EXPECT_EQ(download(d16), bf16_rounded(x));  // device bf16 -> host f32 (host-side cast)
  copy_cast(d32b.t(), d16.t());         // device bf16 -> device f32
  EXPECT_EQ(download(d32b), bf16_rounded(x));
  Buffer e16(gpu(), DType::bf16, {n});
  poison(e16);
  upload(e16, x);                       // host f32 -> device bf16 (host-side cast)
  EXPECT_EQ(download(e16), bf16_rounded(x));
  std::vector<int32_t> ids(100);
  for (int i = 0; i < 100; ++i) ids[size_t(i)] = i * 7919 - 300000;
  Buffer di(gpu(), DType::i32, {100});
  upload_i32(di, ids);
  std::vector<int32_t> back(100, 0);
  copy_cast(host_view_i32(back, {100}), di.t());
  EXPECT_EQ(back, ids);
}

TEST(CudaElementwise, FillAddScaleSumSquares) {
  RT_REQUIRE_CUDA();
  const int64_t n = 4099;
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 1e-6 : 8e-3;
    std::vector<float> y = bf16_rounded(random_vector(n, 2)), x = bf16_rounded(random_vector(n, 3));
    Buffer dy(gpu(), dt, {n}), dx(gpu(), dt, {n});
    poison(dy);
    fill(dy.t(), 2.5f);
    for (float v : download(dy)) ASSERT_EQ(v, 2.5f);
    upload(dy, y);
    upload(dx, x);
    add_inplace(dy.t(), dx.t());
    scale_inplace(dy.t(), -0.75f);
    std::vector<float> ref = y;
    RT_CPU_REFERENCE(add_inplace(host_view(ref, {n}), host_view(x, {n})); scale_inplace(host_view(ref, {n}), -0.75f));
    EXPECT_CLOSE(download(dy), ref, tol);
    double want = 0;
    for (float v : download(dy)) want += double(v) * v;
    EXPECT_NEAR(sum_squares(dy.t()), want, 1e-9 * want);
  }
}

TEST(CudaElementwise, GeluForwardBackward) {
  RT_REQUIRE_CUDA();
  const int64_t N = 37, F = 301;
  std::vector<float> x = random_vector(N * F, 4, 2.f), dout = random_vector(N * F, 5);
  Buffer dx_in(gpu(), DType::f32, {N, F}), dg(gpu(), DType::f32, {N, F});
  Buffer out(gpu(), DType::f32, {N, F}), dx(gpu(), DType::f32, {N, F}), out16(gpu(), DType::bf16, {N, F});
  upload(dx_in, x);
  upload(dg, dout);
  poison(out); poison(dx); poison(out16);
  gelu_fwd(out.t(), dx_in.t());
  gelu_bwd(dx.t(), dg.t(), dx_in.t());
  gelu_fwd(out16.t(), dx_in.t());
  std::vector<float> ref_out(static_cast<size_t>(N * F)), ref_dx(static_cast<size_t>(N * F));
  RT_CPU_REFERENCE(gelu_fwd(host_view(ref_out, {N, F}), host_view(x, {N, F})));
  RT_CPU_REFERENCE(gelu_bwd(host_view(ref_dx, {N, F}), host_view(dout, {N, F}), host_view(x, {N, F})));
  EXPECT_CLOSE(download(out), ref_out, 1e-5);
  EXPECT_CLOSE(download(dx), ref_dx, 1e-5);
  EXPECT_CLOSE(download(out16), ref_out, 8e-3);
}

// f32 on the fused gate|up layout: gate_up (N, 2F) holds per row the gate (std 2) then the up values; N and F
// large enough that the launch grid strides over columns (F > 256) and covers many rows.
TEST(CudaElementwise, SwigluForwardBackward) {
  RT_REQUIRE_CUDA();
  const int64_t N = 29, F = 513;
  std::vector<float> gate_up(static_cast<size_t>(2 * N * F)), dout = random_vector(N * F, 8);
  {
    const std::vector<float> gate = random_vector(N * F, 6, 2.f), up = random_vector(N * F, 7);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < F; ++c) {
        gate_up[size_t(r * 2 * F + c)] = gate[size_t(r * F + c)];
        gate_up[size_t(r * 2 * F + F + c)] = up[size_t(r * F + c)];
      }
  }
  Buffer gu(gpu(), DType::f32, {N, 2 * F}), ddo(gpu(), DType::f32, {N, F});
  Buffer out(gpu(), DType::f32, {N, F}), dgu(gpu(), DType::f32, {N, 2 * F});
  upload(gu, gate_up); upload(ddo, dout);
  poison(out); poison(dgu);
  swiglu_fwd(out.t(), gu.t());
  swiglu_bwd(dgu.t(), ddo.t(), gu.t());
  std::vector<float> r_out(static_cast<size_t>(N * F)), r_dgu(static_cast<size_t>(2 * N * F));
  RT_CPU_REFERENCE(swiglu_fwd(host_view(r_out, {N, F}), host_view(gate_up, {N, 2 * F})));
  RT_CPU_REFERENCE(swiglu_bwd(host_view(r_dgu, {N, 2 * F}), host_view(dout, {N, F}), host_view(gate_up, {N, 2 * F})));
  EXPECT_CLOSE(download(out), r_out, 1e-5);
  EXPECT_CLOSE(download(dgu), r_dgu, 1e-5);
}

// bf16 with F % 8 == 0 takes swiglu's 16-byte path (kernels/cuda/swiglu_common.cuh swiglu_vec8); the same call on
// inputs one element off 16-byte alignment takes the scalar path. Both must give the same bits (the same float math
// per element), the CPU's values within bf16 rounding, no NaN in the poisoned outputs, and swiglu_bwd in place
// (d_gate_up = gate_up) the same as out of place.
TEST(CudaElementwise, SwigluBf16SixteenBytePathGivesTheScalarPathsBits) {
  RT_REQUIRE_CUDA();
  const int64_t N = 29, F = 520;  // 65 words of 8 columns: the grid strides over words and rows
  std::vector<float> gate_up(static_cast<size_t>(2 * N * F));
  {
    const std::vector<float> gate = random_vector(N * F, 16, 2.f), up = random_vector(N * F, 17);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < F; ++c) {
        gate_up[size_t(r * 2 * F + c)] = gate[size_t(r * F + c)];
        gate_up[size_t(r * 2 * F + F + c)] = up[size_t(r * F + c)];
      }
  }
  gate_up = bf16_rounded(gate_up);
  std::vector<float> dout = bf16_rounded(random_vector(N * F, 18));
  // Aligned tensors, and the same shapes one bf16 element into larger buffers (2-byte aligned only).
  Buffer gu(gpu(), DType::bf16, {N, 2 * F}), ddo(gpu(), DType::bf16, {N, F});
  Buffer out(gpu(), DType::bf16, {N, F}), dgu(gpu(), DType::bf16, {N, 2 * F});
  Buffer gu_b(gpu(), DType::bf16, {N * 2 * F + 8}), out_b(gpu(), DType::bf16, {N * F + 8});
  Buffer dgu_b(gpu(), DType::bf16, {N * 2 * F + 8});
  auto off1 = [](const Buffer& b, std::initializer_list<int64_t> dims) {
    return Tensor(static_cast<char*>(b.t().data) + 2, DType::bf16, b.t().device, dims);
  };
  const Tensor gu_s = off1(gu_b, {N, 2 * F}), out_s = off1(out_b, {N, F}), dgu_s = off1(dgu_b, {N, 2 * F});
  upload(gu, gate_up); upload(gu_s, gate_up); upload(ddo, dout);
  poison(out); poison(dgu); poison(out_s); poison(dgu_s);
  swiglu_fwd(out.t(), gu.t());
  swiglu_fwd(out_s, gu_s);
  swiglu_bwd(dgu.t(), ddo.t(), gu.t());
  swiglu_bwd(dgu_s, ddo.t(), gu_s);
  const std::vector<float> o = download(out), os = download(out_s), d = download(dgu), ds = download(dgu_s);
  for (float v : o) ASSERT_FALSE(std::isnan(v)) << "NaN in swiglu_fwd's output";
  for (float v : d) ASSERT_FALSE(std::isnan(v)) << "NaN in swiglu_bwd's output";
  EXPECT_EQ(0, std::memcmp(o.data(), os.data(), o.size() * sizeof(float))) << "swiglu_fwd: 16-byte vs scalar path";
  EXPECT_EQ(0, std::memcmp(d.data(), ds.data(), d.size() * sizeof(float))) << "swiglu_bwd: 16-byte vs scalar path";
  std::vector<float> r_out(static_cast<size_t>(N * F)), r_dgu(static_cast<size_t>(2 * N * F));
  RT_CPU_REFERENCE(swiglu_fwd(host_view(r_out, {N, F}), host_view(gate_up, {N, 2 * F})));
  RT_CPU_REFERENCE(swiglu_bwd(host_view(r_dgu, {N, 2 * F}), host_view(dout, {N, F}), host_view(gate_up, {N, 2 * F})));
  EXPECT_CLOSE(o, r_out, 8e-3);
  EXPECT_CLOSE(d, r_dgu, 8e-3);
  // In place: d_gate_up is gate_up.
  swiglu_bwd(gu.t(), ddo.t(), gu.t());
  const std::vector<float> in_place = download(gu);
  EXPECT_EQ(0, std::memcmp(in_place.data(), d.data(), d.size() * sizeof(float))) << "swiglu_bwd in place";
}

}  // namespace
}  // namespace rt::test
