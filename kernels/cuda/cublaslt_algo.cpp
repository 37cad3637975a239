// The cuBLASLt heuristic query of a GEMM plan (kernels/cuda/cublaslt_algo.h).
#include "kernels/cuda/cublaslt_algo.h"

#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {

cublasStatus_t cublaslt_best_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                  cublasLtMatrixLayout_t c, uint32_t align_a, uint32_t align_b, uint32_t align_c,
                                  cublasLtMatmulHeuristicResult_t& result, int& found) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = cublaslt_workspace_bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c}};
  for (const auto& [attr, value] : aligns)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, value, sizeof(*value)));
  result = cublasLtMatmulHeuristicResult_t{};
  found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc, a, b, c, c, pref, 1, &result,
                                                           &found);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  return st;
}

}  // namespace cuda
}  // namespace rt
