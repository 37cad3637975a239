// CUDA gemm, rmsnorm, rope, embedding, cross-entropy and AdamW against their CPU versions (rt::cpu through
// the dispatcher) on random inputs. Inputs are rounded to bf16 on the host first wherever the GPU reads
// bf16, so both sides see identical values. Tolerances (||out-ref||/||ref||): f32 outputs 1e-5 (summation
// order, fast exp), bf16 outputs 8e-3 (one bf16 rounding).
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

TEST(CudaGemm, AllTransposesAndDtypesWithBeta) {
  RT_REQUIRE_CUDA();
  const int64_t M = 72, N = 48, K = 136;
  struct Case { DType ab, c; double tol; };
  for (Case cs : {Case{DType::f32, DType::f32, 1e-5}, Case{DType::bf16, DType::f32, 1e-5},
                  Case{DType::bf16, DType::bf16, 8e-3}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE("ab " + std::string(dtype_name(cs.ab)) + " c " + dtype_name(cs.c) + " ta " +
                     std::to_string(ta) + " tb " + std::to_string(tb));
        const uint64_t seed = 100 + ta * 2 + tb;
        std::vector<float> a = bf16_rounded(random_vector(M * K, seed)), b = bf16_rounded(random_vector(K * N, seed + 10));
        std::vector<float> c = bf16_rounded(random_vector(M * N, seed + 20));
        Buffer da(gpu(), cs.ab, {ta ? K : M, ta ? M : K}), db(gpu(), cs.ab, {tb ? N : K, tb ? K : N});
        Buffer dc(gpu(), cs.c, {M, N});
        upload(da, a); upload(db, b); upload(dc, c);
        gemm(dc.t(), da.t(), db.t(), ta, tb, 0.7f, 0.3f);
        std::vector<float> ref = c;
        RT_CPU_REFERENCE(gemm(host_view(ref, {M, N}), host_view(a, {ta ? K : M, ta ? M : K}),
                              host_view(b, {tb ? N : K, tb ? K : N}), ta, tb, 0.7f, 0.3f));
        EXPECT_CLOSE(download(dc), ref, cs.tol);
      }
    }
  }
  // beta = 0 must ignore NaN in c (poisoned output).
  std::vector<float> a = random_vector(M * K, 7), b = random_vector(K * N, 8), ref(static_cast<size_t>(M * N));
  Buffer da(gpu(), DType::f32, {M, K}), db(gpu(), DType::f32, {K, N}), dc(gpu(), DType::f32, {M, N});
  upload(da, a); upload(db, b); poison(dc);
  gemm(dc.t(), da.t(), db.t(), false, false, 1.f, 0.f);
  RT_CPU_REFERENCE(gemm(host_view(ref, {M, N}), host_view(a, {M, K}), host_view(b, {K, N}), false, false, 1.f, 0.f));
  EXPECT_CLOSE(download(dc), ref, 1e-5);
}

// One row against (N,K)^T, the decode step's GEMMs (kernels/cuda/gemv.cu): against fp64 of the same bf16 inputs, with
// N not a multiple of the kernel's 4 rows, K of one and of several passes over the 8 warps, c f32 and bf16, beta 0 on
// a poisoned c (must not be read) and beta 0.5; and K % 8 != 0, which goes to cuBLASLt.
TEST(CudaGemm, OneRowMatchesFp64) {
  RT_REQUIRE_CUDA();
  struct Case { int64_t N, K; DType c; float beta; };
  const Case cases[] = {{2048, 2048, DType::bf16, 0.f}, {37, 5632, DType::f32, 0.f}, {1, 8, DType::f32, 0.5f},
                        {513, 4104, DType::bf16, 0.5f}, {64, 100, DType::f32, 0.f}};
  for (const Case& cs : cases) {
    SCOPED_TRACE("N " + std::to_string(cs.N) + " K " + std::to_string(cs.K) + " c " + dtype_name(cs.c) + " beta " +
                 std::to_string(cs.beta));
    const uint64_t seed = 300 + uint64_t(cs.N + cs.K);
    const std::vector<float> a = bf16_rounded(random_vector(cs.K, seed)), b = bf16_rounded(random_vector(cs.N * cs.K, seed + 1));
    const std::vector<float> c0 = bf16_rounded(random_vector(cs.N, seed + 2));
    Buffer da(gpu(), DType::bf16, {1, cs.K}), db(gpu(), DType::bf16, {cs.N, cs.K}), dc(gpu(), cs.c, {1, cs.N});
    upload(da, a);
    upload(db, b);
    if (cs.beta == 0.f) poison(dc);
    else upload(dc, c0);
    gemm(dc.t(), da.t(), db.t(), false, true, 1.25f, cs.beta);
    std::vector<float> ref(size_t(cs.N));
    for (int64_t n = 0; n < cs.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < cs.K; ++k) s += double(a[size_t(k)]) * double(b[size_t(n * cs.K + k)]);
      ref[size_t(n)] = float(1.25 * s + (cs.beta != 0.f ? double(cs.beta) * c0[size_t(n)] : 0.0));
    }
    const std::vector<float> got = download(dc);
    for (float v : got) ASSERT_FALSE(std::isnan(v)) << "NaN in the output";
    EXPECT_CLOSE(got, ref, cs.c == DType::f32 ? 1e-5 : 8e-3);
  }
}

TEST(CudaRmsnorm, ForwardBackwardF32AndBf16) {
  RT_REQUIRE_CUDA();
  const int64_t N = 33, C = 520;
  std::vector<float> x = bf16_rounded(random_vector(N * C, 11, 1.5f)), w = bf16_rounded(random_vector(C, 12, 0.3f, 1.f));
  std::vector<float> g = bf16_rounded(random_vector(N * C, 13)), dx0 = random_vector(N * C, 14), dw0 = random_vector(C, 15);
  std::vector<float> r_out(static_cast<size_t>(N * C)), r_rstd(static_cast<size_t>(N)), r_dx = dx0, r_dw = dw0;
  RT_CPU_REFERENCE(rmsnorm_fwd(host_view(r_out, {N, C}), host_view(r_rstd, {N}), host_view(x, {N, C}), host_view(w, {C}), 1e-5f));
  RT_CPU_REFERENCE(rmsnorm_bwd(host_view(r_dx, {N, C}), host_view(r_dw, {C}), host_view(g, {N, C}), host_view(x, {N, C}),
                               host_view(w, {C}), host_view(r_rstd, {N})));
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffer dxin(gpu(), dt, {N, C}), dw(gpu(), dt, {C}), dout(gpu(), dt, {N, C}), rstd(gpu(), DType::f32, {N});
    Buffer dg(gpu(), dt, {N, C}), ddx(gpu(), DType::f32, {N, C}), ddw(gpu(), DType::f32, {C});
    upload(dxin, x); upload(dw, w); upload(dg, g); upload(ddx, dx0); upload(ddw, dw0);
    poison(dout); poison(rstd);
    rmsnorm_fwd(dout.t(), rstd.t(), dxin.t(), dw.t(), 1e-5f);
    rmsnorm_bwd(ddx.t(), ddw.t(), dg.t(), dxin.t(), dw.t(), rstd.t());
    EXPECT_CLOSE(download(dout), r_out, dt == DType::f32 ? 1e-5 : 8e-3);
    EXPECT_CLOSE(download(rstd), r_rstd, 1e-5);
    EXPECT_CLOSE(download(ddx), r_dx, 1e-5);
    EXPECT_CLOSE(download(ddw), r_dw, 1e-5);
  }
}

TEST(CudaRope, MatchesCpuAndInverts) {
  RT_REQUIRE_CUDA();
  const int64_t B = 2, T = 19, H = 3, D = 64;
  std::vector<float> x = random_vector(B * T * H * D, 21);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::mt19937 rng(22);
  for (auto& p : pos) p = int32_t(rng() % 4096);
  Buffer dx(gpu(), DType::f32, {B, T, H, D}), dpos(gpu(), DType::i32, {T});
  upload(dx, x);
  upload_i32(dpos, pos);
  rope(dx.t(), dpos.t(), RopeFreqs::plain(10000.0, D), false);
  std::vector<float> ref = x;
  RT_CPU_REFERENCE(rope(host_view(ref, {B, T, H, D}), host_view_i32(pos, {T}), RopeFreqs::plain(10000.0, D), false));
  EXPECT_CLOSE(download(dx), ref, 1e-5);
  // Large positions: the inverse rotation restores x.
  for (auto& p : pos) p = int32_t(rng() % 2000000);
  upload(dx, x);
  upload_i32(dpos, pos);
  rope(dx.t(), dpos.t(), RopeFreqs::plain(500000.0, D), false);
  rope(dx.t(), dpos.t(), RopeFreqs::plain(500000.0, D), true);
  EXPECT_CLOSE(download(dx), x, 1e-6);
}

// Scaled frequencies (a yarn-like table with a cos/sin factor, as framework/config/rope_scaling.cpp builds them):
// the CUDA op against the CPU op, forward and transpose, with positions up to 2^20.
TEST(CudaRope, ScaledFrequenciesMatchCpu) {
  RT_REQUIRE_CUDA();
  const int64_t B = 1, T = 33, H = 2, D = 128;
  RopeFreqs f = RopeFreqs::plain(500000.0, D);
  for (int i = 0; i < f.pairs; ++i) f.inv_freq[i] /= 1.0 + 7.0 * double(i) / double(f.pairs);  // a ramp to /8
  f.cos_sin_scale = 1.2f;
  std::vector<float> x = random_vector(B * T * H * D, 23);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::mt19937 rng(24);
  for (auto& p : pos) p = int32_t(rng() % (1u << 20));
  for (bool inverse : {false, true}) {
    Buffer dx(gpu(), DType::f32, {B, T, H, D}), dpos(gpu(), DType::i32, {T});
    upload(dx, x);
    upload_i32(dpos, pos);
    rope(dx.t(), dpos.t(), f, inverse);
    std::vector<float> ref = x;
    RT_CPU_REFERENCE(rope(host_view(ref, {B, T, H, D}), host_view_i32(pos, {T}), f, inverse));
    EXPECT_CLOSE(download(dx), ref, 1e-5);
  }
}

TEST(CudaEmbedding, ForwardBackward) {
  RT_REQUIRE_CUDA();
  const int64_t V = 50, C = 96, N = 200;
  std::vector<float> table = bf16_rounded(random_vector(V * C, 31)), g = bf16_rounded(random_vector(N * C, 32));
  std::vector<float> dt0 = random_vector(V * C, 33);
  std::vector<int32_t> tok(static_cast<size_t>(N));
  std::mt19937 rng(34);
  for (auto& t : tok) t = int32_t(rng() % V);
  std::vector<float> r_out(static_cast<size_t>(N * C)), r_dt = dt0;
  RT_CPU_REFERENCE(embedding_fwd(host_view(r_out, {N, C}), host_view_i32(tok, {N}), host_view(table, {V, C})));
  RT_CPU_REFERENCE(embedding_bwd(host_view(r_dt, {V, C}), host_view(g, {N, C}), host_view_i32(tok, {N})));
  for (DType dt : {DType::f32, DType::bf16}) {
    Buffer dtab(gpu(), dt, {V, C}), dout(gpu(), dt, {N, C}), dtok(gpu(), DType::i32, {N});
    Buffer dg(gpu(), dt, {N, C}), ddt(gpu(), DType::f32, {V, C});
    upload(dtab, table); upload(dg, g); upload(ddt, dt0); upload_i32(dtok, tok);
    poison(dout);
    embedding_fwd(dout.t(), dtok.t(), dtab.t());
    embedding_bwd(ddt.t(), dg.t(), dtok.t());
    EXPECT_CLOSE(download(dout), r_out, 1e-7);
    EXPECT_CLOSE(download(ddt), r_dt, 1e-6);
  }
}

TEST(CudaCrossEntropy, LossAndGradientWithIgnoredRows) {
  RT_REQUIRE_CUDA();
  const int64_t n = 17, V = 1000;
  std::vector<float> logits = bf16_rounded(random_vector(n * V, 41, 3.f));
  std::vector<int32_t> tgt(static_cast<size_t>(n));
  std::mt19937 rng(42);
  for (auto& t : tgt) t = int32_t(rng() % V);
  tgt[3] = tgt[10] = tgt[16] = -1;
  std::vector<float> r_grad = logits, r_loss(static_cast<size_t>(n));
  RT_CPU_REFERENCE(cross_entropy(host_view(r_grad, {n, V}), host_view_i32(tgt, {n}), host_view(r_loss, {n}), 0.25f, true));
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffer dl(gpu(), dt, {n, V}), dtg(gpu(), DType::i32, {n}), dloss(gpu(), DType::f32, {n});
    upload(dl, logits); upload_i32(dtg, tgt); poison(dloss);
    cross_entropy(dl.t(), dtg.t(), dloss.t(), 0.25f, false);
    EXPECT_CLOSE(download(dl), logits, 0.0);  // untouched without want_grad
    EXPECT_CLOSE(download(dloss), r_loss, 1e-5);
    poison(dloss);
    cross_entropy(dl.t(), dtg.t(), dloss.t(), 0.25f, true);
    EXPECT_CLOSE(download(dloss), r_loss, 1e-5);
    EXPECT_CLOSE(download(dl), r_grad, dt == DType::f32 ? 1e-5 : 8e-3);
  }
}

// Rows that start off a 16-byte boundary (V odd: each row starts elsewhere), the single elements before and after
// the vectors, a vocabulary shorter than one vector, and the target in the head, the body and the tail.
TEST(CudaCrossEntropy, UnalignedRowsOfALargeVocabulary) {
  RT_REQUIRE_CUDA();
  for (const int64_t V : {int64_t(50257), int64_t(5)}) {
    const int64_t n = 9;
    std::vector<float> logits = bf16_rounded(random_vector(n * V, 43, 4.f));
    std::vector<int32_t> tgt = {0, int32_t(V - 1), -1, int32_t(V / 2), 1, int32_t(V - 2), 2, int32_t(V / 3), 3};
    std::vector<float> r_grad = logits, r_loss(static_cast<size_t>(n));
    RT_CPU_REFERENCE(
        cross_entropy(host_view(r_grad, {n, V}), host_view_i32(tgt, {n}), host_view(r_loss, {n}), 0.5f, true));
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " V=" + std::to_string(V));
      Buffer dl(gpu(), dt, {n, V}), dtg(gpu(), DType::i32, {n}), dloss(gpu(), DType::f32, {n});
      upload(dl, logits); upload_i32(dtg, tgt); poison(dloss);
      cross_entropy(dl.t(), dtg.t(), dloss.t(), 0.5f, true);
      EXPECT_CLOSE(download(dloss), r_loss, 1e-5);
      EXPECT_CLOSE(download(dl), r_grad, dt == DType::f32 ? 1e-5 : 8e-3);
    }
  }
}

TEST(CudaAdamw, ThreeStepsWithDecayAndLowpCopy) {
  RT_REQUIRE_CUDA();
  const int64_t n = 1000;
  std::vector<float> p = random_vector(n, 51), m(static_cast<size_t>(n), 0.f), v(static_cast<size_t>(n), 0.f);
  Buffer dp(gpu(), DType::f32, {n}), dg(gpu(), DType::f32, {n}), dm(gpu(), DType::f32, {n}), dv(gpu(), DType::f32, {n});
  Buffer dlow(gpu(), DType::bf16, {n});
  upload(dp, p); upload(dm, m); upload(dv, v);
  poison(dlow);
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = random_vector(n, 52 + uint64_t(step), 0.1f);
    upload(dg, g);
    AdamWArgs args;
    args.lr = 1e-2f;
    args.weight_decay = 0.1f;
    args.step = step;
    adamw(dp.t(), dg.t(), dm.t(), dv.t(), args, dlow.t());
    RT_CPU_REFERENCE(adamw(host_view(p, {n}), host_view(g, {n}), host_view(m, {n}), host_view(v, {n}), args, Tensor()));
  }
  EXPECT_CLOSE(download(dp), p, 1e-6);
  EXPECT_CLOSE(download(dm), m, 1e-6);
  EXPECT_CLOSE(download(dv), v, 1e-6);
  EXPECT_EQ(download(dlow), bf16_rounded(download(dp)));
}

}  // namespace
}  // namespace rt::test

namespace rt::test {
namespace {

// The divergence guard on the device: a non-finite norm gives a NaN factor (and a counted skip), and adamw
// with a NaN factor leaves param, m, v and the bf16 copy exactly as they were.
TEST(CudaDivergenceGuard, NonFiniteNormSkipsTheUpdateAndCounts) {
  RT_REQUIRE_CUDA();
  const int64_t n = 1000;
  const std::vector<float> p = random_vector(n, 61), m = random_vector(n, 62, 0.1f), g = random_vector(n, 63, 0.1f);
  std::vector<float> v = random_vector(n, 64, 0.1f);
  for (float& x : v) x = x * x;
  Buffer dp(gpu(), DType::f32, {n}), dg(gpu(), DType::f32, {n}), dm(gpu(), DType::f32, {n}), dv(gpu(), DType::f32, {n});
  Buffer dlow(gpu(), DType::bf16, {n}), sumsq(gpu(), DType::f32, {1}), scale(gpu(), DType::f32, {2});
  upload(dp, p), upload(dg, g), upload(dm, m), upload(dv, v);
  copy_cast(dlow.t(), dp.t());
  const std::vector<float> low_before = download(dlow);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    upload(sumsq, std::vector<float>{bad});
    upload(scale, std::vector<float>{0.5f, 2.f});  // count 2 before
    grad_clip_scale(sumsq.t(), scale.t(), 1.f);
    const std::vector<float> s = download(scale);
    EXPECT_TRUE(std::isnan(s[0])) << s[0];
    EXPECT_EQ(s[1], 3.f);
    AdamWArgs args;
    args.lr = 1e-2f, args.weight_decay = 0.1f, args.step = 3;
    adamw(dp.t(), dg.t(), dm.t(), dv.t(), args, dlow.t(), scale.t().slice(0, 1));
    EXPECT_EQ(download(dp), p);
    EXPECT_EQ(download(dm), m);
    EXPECT_EQ(download(dv), v);
    EXPECT_EQ(download(dlow), low_before);
  }
  // A finite norm is not counted and updates as before.
  upload(sumsq, std::vector<float>{4.f});
  upload(scale, std::vector<float>{0.f, 3.f});
  grad_clip_scale(sumsq.t(), scale.t(), 1.f);
  const std::vector<float> s = download(scale);
  EXPECT_NEAR(s[0], 0.5f, 1e-6);
  EXPECT_EQ(s[1], 3.f);
}

}  // namespace
}  // namespace rt::test
