// linear_gelu_fwd and linear_dgelu: the MLP's first Linear with its GELU (tanh), and the gradient through the
// second Linear and the GELU, each one cuBLASLt call with the GELU_AUX / DGELU epilogue where cuBLASLt has an
// algorithm for the shape; otherwise (or where RT_GEMM_EPILOGUES turns it off: 0, or the other one's name) the
// unfused gemm + gelu kernels, in place.
//   linear_gelu_fwd: pre (m,F) = x (m,C) @ w (F,C)^T;  out (m,F) = gelu(pre)
//   linear_dgelu:    dpre (m,F) = (dout (m,C) @ w (C,F)) * gelu'(pre)
// The fused forward computes gelu from the f32 accumulator rather than from pre rounded to bf16 (a difference
// below bf16's rounding of out).
#include <cstdio>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_epilogue.h"

namespace rt {
namespace cuda {
#include "kernels/backend_ops.h"  // cuda::gemm, cuda::gelu_*: called directly, inside this op's profiling scope

namespace {

// One line per process and op the first time the unfused path runs, so a benchmark log says which path it timed.
void note_fallback(bool& noted, const char* op, GemmEpilogue e, int64_t m, int64_t F) {
  if (noted) return;
  noted = true;
  std::fprintf(stderr, "%s: %s (first at m=%lld, F=%lld); running gemm + the GELU kernel\n", op,
               gemm_epilogue_enabled(e) ? "no cuBLASLt epilogue algorithm for this shape (or F % 8 != 0)"
                                        : "the epilogue is off (RT_GEMM_EPILOGUES)",
               (long long)m, (long long)F);
}

}  // namespace

void linear_gelu_fwd(Tensor out, Tensor pre, const Tensor& x, const Tensor& w) {
  const char* op = "linear_gelu_fwd";
  require_same_numel(out, pre, op, "out", "pre");
  RT_CHECK(out.dtype == pre.dtype, op << ": out is " << dtype_name(out.dtype) << " but pre is "
                                      << dtype_name(pre.dtype) << "; give both the activation dtype");
  if (gemm_with_epilogue(out, x, w, false, true, GemmEpilogue::gelu_aux, pre)) return;
  static bool noted = false;
  note_fallback(noted, op, GemmEpilogue::gelu_aux, leading_rows(pre), last_dim(pre));
  cuda::gemm(pre, x, w, false, true, 1.f, 0.f);  // (m,F) = (m,C) @ (F,C)^T
  cuda::gelu_fwd(out, pre);                      // (m,F)
}

void linear_dgelu(Tensor dpre, const Tensor& dout, const Tensor& w, const Tensor& pre) {
  const char* op = "linear_dgelu";
  require_same_numel(dpre, pre, op, "dpre", "pre");
  RT_CHECK(dpre.data != pre.data, op << ": dpre and pre must be different buffers");
  RT_CHECK(dpre.dtype == pre.dtype, op << ": dpre is " << dtype_name(dpre.dtype) << " but pre is "
                                       << dtype_name(pre.dtype) << "; give both the activation dtype");
  if (gemm_with_epilogue(dpre, dout, w, false, false, GemmEpilogue::dgelu, pre)) return;
  static bool noted = false;
  note_fallback(noted, op, GemmEpilogue::dgelu, leading_rows(pre), last_dim(pre));
  cuda::gemm(dpre, dout, w, false, false, 1.f, 0.f);  // (m,F) = (m,C) @ (C,F)
  cuda::gelu_bwd(dpre, dpre, pre);                    // (m,F), elementwise in place
}

}  // namespace cuda
}  // namespace rt
