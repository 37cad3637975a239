// gemm on the host: c (M,N) = alpha * op(a) @ op(b) + beta * c, all f32.
// Goto-style blocking: a (KC x NC) panel of op(b) and an (MC x KC) block of op(a) are packed into
// contiguous, zero-padded micro-panels, and a 6x16 register-blocked micro-kernel accumulates each
// tile of c. The body is compiled twice, for AVX2+FMA and for baseline x86-64, and picked at run time.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
namespace {

constexpr int64_t kMR = 6;     // micro-tile rows of c
constexpr int64_t kNR = 16;    // micro-tile columns of c (two 8-float vectors)
constexpr int64_t kKC = 256;   // depth of one packed panel (a 6x256 + 256x16 pair fits L1)
constexpr int64_t kMC = 96;    // rows of the packed op(a) block (multiple of kMR; ~96 KiB, L2)
constexpr int64_t kNC = 512;   // columns of the packed op(b) panel (multiple of kNR; ~512 KiB)

typedef float vec8 __attribute__((vector_size(32)));
typedef float vec8u __attribute__((vector_size(32), aligned(4)));  // unaligned access to c

// Strided read-only view of a matrix: element (r, k) is p[r * rs + k * cs].
struct MatView {
  const float* p;
  int64_t rs, cs;
  float at(int64_t r, int64_t k) const { return p[r * rs + k * cs]; }
};

// Thread-local, 64-byte aligned, grow-only scratch: allocated once per thread, never per call.
struct PackBuffers {
  float* a = nullptr;  // (kMC/kMR panels, kKC, kMR)
  float* b = nullptr;  // (kNC/kNR panels, kKC, kNR)
  PackBuffers() {
    a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMC * kKC));
    b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kKC * kNC));
    RT_CHECK(a && b, "gemm: cannot allocate " << (kMC * kKC + kKC * kNC) * 4 << " bytes of packing scratch");
  }
  ~PackBuffers() {
    std::free(a);
    std::free(b);
  }
};

PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// Packs rows [0, mc) x depth [0, kc) of A into panels of kMR rows: ap[panel][k][r], zero-padded.
__attribute__((always_inline)) inline void pack_a(const MatView& A, int64_t mc, int64_t kc, float* ap) {
  for (int64_t i0 = 0; i0 < mc; i0 += kMR) {
    const int64_t mr = mc - i0 < kMR ? mc - i0 : kMR;
    float* dst = ap + i0 * kc;  // (kc, kMR)
    for (int64_t k = 0; k < kc; ++k) {
      int64_t r = 0;
      for (; r < mr; ++r) dst[k * kMR + r] = A.at(i0 + r, k);
      for (; r < kMR; ++r) dst[k * kMR + r] = 0.f;
    }
  }
}

// Packs depth [0, kc) x columns [0, nc) of B into panels of kNR columns: bp[panel][k][j], zero-padded.
__attribute__((always_inline)) inline void pack_b(const MatView& B, int64_t kc, int64_t nc, float* bp) {
  for (int64_t j0 = 0; j0 < nc; j0 += kNR) {
    const int64_t nr = nc - j0 < kNR ? nc - j0 : kNR;
    float* dst = bp + j0 * kc;  // (kc, kNR)
    if (B.cs == 1 && nr == kNR) {
      for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kNR, B.p + k * B.rs + j0, sizeof(float) * kNR);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      int64_t j = 0;
      for (; j < nr; ++j) dst[k * kNR + j] = B.at(k, j0 + j);
      for (; j < kNR; ++j) dst[k * kNR + j] = 0.f;
    }
  }
}

// c[0:mr, 0:nr] += alpha * ap (kc, kMR)^T-panel @ bp (kc, kNR)-panel.
__attribute__((always_inline)) inline void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c,
                                                        int64_t ldc, int64_t mr, int64_t nr, float alpha) {
  vec8 acc[kMR][2];
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = vec8{};
  for (int64_t k = 0; k < kc; ++k) {
    const vec8 b0 = *reinterpret_cast<const vec8*>(bp + k * kNR);
    const vec8 b1 = *reinterpret_cast<const vec8*>(bp + k * kNR + 8);
    const float* a = ap + k * kMR;
    for (int r = 0; r < kMR; ++r) {
      acc[r][0] += a[r] * b0;
      acc[r][1] += a[r] * b1;
    }
  }
  if (mr == kMR && nr == kNR) {
    for (int r = 0; r < kMR; ++r) {
      vec8u* row = reinterpret_cast<vec8u*>(c + r * ldc);
      row[0] += alpha * acc[r][0];
      row[1] += alpha * acc[r][1];
    }
    return;
  }
  alignas(32) float tile[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    *reinterpret_cast<vec8*>(&tile[r][0]) = acc[r][0];
    *reinterpret_cast<vec8*>(&tile[r][8]) = acc[r][1];
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) c[r * ldc + j] += alpha * tile[r][j];
}

// c (M,N) += alpha * A (M,K) @ B (K,N); row r of c starts at c + r * ldc.
__attribute__((always_inline)) inline void gemm_accumulate(float* c, int64_t ldc, int64_t M, int64_t N, int64_t K,
                                                           const MatView& A, const MatView& B, float alpha) {
  PackBuffers& buf = pack_buffers();
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = N - jc < kNC ? N - jc : kNC;
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = K - pc < kKC ? K - pc : kKC;
      pack_b(MatView{B.p + pc * B.rs + jc * B.cs, B.rs, B.cs}, kc, nc, buf.b);
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = M - ic < kMC ? M - ic : kMC;
        pack_a(MatView{A.p + ic * A.rs + pc * A.cs, A.rs, A.cs}, mc, kc, buf.a);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = nc - jr < kNR ? nc - jr : kNR;
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t mr = mc - ir < kMR ? mc - ir : kMR;
            micro_kernel(kc, buf.a + ir * kc, buf.b + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc, mr, nr,
                         alpha);
          }
        }
      }
    }
  }
}

__attribute__((target("avx2,fma"))) void gemm_accumulate_avx2(float* c, int64_t ldc, int64_t M, int64_t N,
                                                               int64_t K, const MatView& A, const MatView& B,
                                                               float alpha) {
  gemm_accumulate(c, ldc, M, N, K, A, B, alpha);
}

void gemm_accumulate_baseline(float* c, int64_t ldc, int64_t M, int64_t N, int64_t K, const MatView& A,
                              const MatView& B, float alpha) {
  gemm_accumulate(c, ldc, M, N, K, A, B, alpha);
}

}  // namespace

void gemm_strided_accumulate(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t a_rs,
                             int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0 || alpha == 0.f) return;
  if (use_avx2_fma())
    gemm_accumulate_avx2(c, ldc, M, N, K, MatView{a, a_rs, a_cs}, MatView{b, b_rs, b_cs}, alpha);
  else
    gemm_accumulate_baseline(c, ldc, M, N, K, MatView{a, a_rs, a_cs}, MatView{b, b_rs, b_cs}, alpha);
}

void gemm(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  require_cpu_f32(c, "gemm", "c");
  require_cpu_f32(a, "gemm", "a");
  require_cpu_f32(b, "gemm", "b");
  RT_CHECK(c.ndim == 2 && a.ndim == 2 && b.ndim == 2,
           "gemm: expects 2-D tensors, got c " << c.shape_str() << ", a " << a.shape_str() << ", b "
                                               << b.shape_str() << "; view batched tensors as (rows, cols) first");
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
  check_shape(a, {trans_a ? K : M, trans_a ? M : K}, "gemm", trans_a ? "a (K,M) [trans_a]" : "a (M,K)");
  check_shape(b, {trans_b ? N : K, trans_b ? K : N}, "gemm", trans_b ? "b (N,K) [trans_b]" : "b (K,N)");
  float* pc = c.ptr<float>();  // (M, N)
  const int64_t mn = M * N;
  if (mn == 0) return;
  RT_CHECK(pc != a.ptr<float>() && pc != b.ptr<float>(), "gemm: c must not alias a or b");

  // beta first (beta == 0 overwrites, so stale NaN in c never leaks through), then c += alpha * op(a) op(b).
  if (beta == 0.f) {
    std::memset(pc, 0, sizeof(float) * size_t(mn));
  } else if (beta != 1.f) {
    for (int64_t i = 0; i < mn; ++i) pc[i] *= beta;
  }
  if (K == 0 || alpha == 0.f) return;

  // op(a) (M,K) and op(b) (K,N) as strided views of a and b.
  gemm_strided_accumulate(M, N, K, alpha, a.ptr<float>(), trans_a ? 1 : K, trans_a ? M : 1, b.ptr<float>(),
                          trans_b ? 1 : N, trans_b ? K : 1, pc, N);
}

}  // namespace cpu
}  // namespace rt
