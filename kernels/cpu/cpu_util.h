// Small helpers shared by the CPU ops in kernels/cpu/: argument checks and the backend declarations.
// The CPU path is fp32 throughout (DESIGN.md "Numerics"); integer inputs (tokens, positions) are i32.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt {
namespace cpu {
#include "kernels/backend_ops.h"

// True when the CPU supports AVX2 and FMA and the baseline build was not forced (kernels/cpu/cpu_features.cpp).
bool use_avx2_fma();
// Tests: run the baseline x86-64 build of every hot loop even on an AVX2 machine.
void force_baseline_simd(bool on);

// The CPU gemm's engine (kernels/cpu/gemm.cpp), for ops that multiply strided tiles (attention):
//   c (M,N) += alpha * A (M,K) @ B (K,N), with A(r,k) = a[r*a_rs + k*a_cs], B(k,n) = b[k*b_rs + n*b_cs],
//   and row r of c at c + r*ldc. c must not overlap a or b.
void gemm_strided_accumulate(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t a_rs,
                             int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc);

// Refuses a tensor that is not a defined f32 tensor on the host.
inline void require_cpu_f32(const Tensor& t, const char* op, const char* arg) {
  RT_CHECK(t.defined() || t.numel() == 0, op << ": " << arg << " is not defined (null data)");
  RT_CHECK(t.device.is_cpu(), op << ": " << arg << " is on " << t.device.str() << ", expected a host tensor");
  check_dtype(t, DType::f32, op, arg);
}

inline void require_cpu_i32(const Tensor& t, const char* op, const char* arg) {
  RT_CHECK(t.defined() || t.numel() == 0, op << ": " << arg << " is not defined (null data)");
  RT_CHECK(t.device.is_cpu(), op << ": " << arg << " is on " << t.device.str() << ", expected a host tensor");
  check_dtype(t, DType::i32, op, arg);
}

inline void require_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  RT_CHECK(a.numel() == b.numel() && a.ndim == b.ndim,
           op << ": " << an << " " << a.shape_str() << " and " << bn << " " << b.shape_str()
              << " must have the same shape");
  for (int i = 0; i < a.ndim; ++i)
    RT_CHECK(a.shape[i] == b.shape[i], op << ": " << an << " " << a.shape_str() << " and " << bn << " "
                                          << b.shape_str() << " must have the same shape");
}

// Size of the last dimension and the number of rows before it (a 1-D tensor is one row).
inline int64_t last_dim(const Tensor& t) { return t.ndim == 0 ? 1 : t.shape[t.ndim - 1]; }
inline int64_t leading_rows(const Tensor& t) {
  const int64_t c = last_dim(t);
  return c == 0 ? 0 : t.numel() / c;
}

// SwiGLU on the fused gate|up layout (swiglu_fwd / swiglu_bwd): N and F from out (N,F) (or dout), and gate_up
// must be (N, 2F).
inline void swiglu_shapes(const Tensor& out, const Tensor& gate_up, const char* op, const char* out_name, int64_t& N,
                          int64_t& F) {
  F = last_dim(out), N = leading_rows(out);
  RT_CHECK(last_dim(gate_up) == 2 * F && leading_rows(gate_up) == N,
           op << ": gate_up " << gate_up.shape_str() << " must be (N, 2F) for " << out_name << " "
              << out.shape_str() << " (N, F): the gate columns then the up columns of each row");
}

}  // namespace cpu
}  // namespace rt
