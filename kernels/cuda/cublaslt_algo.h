// What both GEMM paths (kernels/cuda/gemm.cu, kernels/cuda/gemm_fp8.cu) do when they build a plan: the cuBLASLt
// heuristic query (this device's workspace limit, the operands' alignments, the single best algorithm) and the
// epilogue's attributes.
#pragma once
#include <cublasLt.h>

#include <cstdint>

#include "kernels/cuda/gemm_epilogue.h"

namespace rt {
namespace cuda {

// The heuristic's best algorithm for `desc` over layouts a, b and c (which is also d), with the alignments in bytes
// of a, b and c / d. Returns the heuristic's status; `found` is 0 or 1, `result` valid when it is 1.
cublasStatus_t cublaslt_best_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                  cublasLtMatrixLayout_t c, uint32_t align_a, uint32_t align_b, uint32_t align_c,
                                  cublasLtMatmulHeuristicResult_t& result, int& found);

// Sets epilogue e on desc (none: nothing), with its aux matrix at `aux` (the heuristic reads its alignment) of leading
// dimension aux_ld; shared by the bf16 and the FP8 plans.
void cublaslt_set_epilogue(cublasLtMatmulDesc_t desc, GemmEpilogue e, const void* aux, int64_t aux_ld);

}  // namespace cuda
}  // namespace rt
