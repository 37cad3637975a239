// The cuBLASLt heuristic query that both GEMM paths (kernels/cuda/gemm.cu, kernels/cuda/gemm_fp8.cu) make when they
// build a plan: this device's workspace limit, the operands' alignments, and the single best algorithm.
#pragma once
#include <cublasLt.h>

#include <cstdint>

namespace rt {
namespace cuda {

// The heuristic's best algorithm for `desc` over layouts a, b and c (which is also d), with the alignments in bytes
// of a, b and c / d. Returns the heuristic's status; `found` is 0 or 1, `result` valid when it is 1.
cublasStatus_t cublaslt_best_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                  cublasLtMatrixLayout_t c, uint32_t align_a, uint32_t align_b, uint32_t align_c,
                                  cublasLtMatmulHeuristicResult_t& result, int& found);

}  // namespace cuda
}  // namespace rt
