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

void cublaslt_set_epilogue(cublasLtMatmulDesc_t desc, GemmEpilogue e, const void* aux, int64_t aux_ld) {
  if (e == GemmEpilogue::none) return;
  const cublasLtEpilogue_t lt = e == GemmEpilogue::gelu_aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_DGELU;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &lt, sizeof(lt)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
}

}  // namespace cuda
}  // namespace rt
