// gemm via cuBLASLt: c (M,N) = alpha * op(a) @ op(b) + beta * c, row-major.
//   a, b: both bf16 (f32 accumulate, c bf16 or f32) or both f32 (exact f32 compute, c f32).
// cuBLASLt is column-major, so we compute c^T = op(b)^T op(a)^T: a row-major (r,c) matrix is a
// column-major (c,r) matrix with leading dimension c. Plans (descriptors + chosen algorithm) are cached
// per shape, dtype, pointer alignment and epilogue, so a training step makes no heuristic queries after the first.
// One-row products (M = 1, b transposed, bf16) go to gemv_rows (kernels/cuda/gemv.cu) instead.
// gemm_with_epilogue (kernels/cuda/gemm_epilogue.h) adds cuBLASLt's GELU_AUX / DGELU epilogues for
// linear_gelu_fwd / linear_dgelu; it reports "no algorithm" instead of failing, so those ops can fall back.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_algo.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/gemv.h"

namespace rt {
namespace cuda {
namespace {

struct PlanKey {
  int64_t M, N, K;
  int device;
  uint8_t ta, tb, ab_dtype, c_dtype;
  uint16_t align_a, align_b, align_c;
  uint8_t epilogue;    // GemmEpilogue
  uint16_t align_aux;  // of the epilogue's aux matrix (0 without one)
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&k);
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(PlanKey); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no algorithm (only cached for epilogues, which fall back)
};

std::mutex g_plans_mutex;
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

uint16_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint16_t align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

cudaDataType_t cuda_type(DType d) { return d == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Builds (once) the plan for one problem. m, n, k are cuBLASLt's (column-major) sizes. aux: the epilogue's
// matrix (GELU input), the shape of c, or null. Without an epilogue a missing algorithm is an error.
const Plan& plan_for(const PlanKey& key, const Tensor& a, const Tensor& b, const void* aux = nullptr) {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  Plan plan;
  const cudaDataType_t ab = cuda_type(DType(key.ab_dtype)), ct = cuda_type(DType(key.c_dtype));
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t opb = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const GemmEpilogue epi = GemmEpilogue(key.epilogue);
  cublaslt_set_epilogue(plan.desc, epi, aux, key.N);  // aux is laid out as c: column-major (N, M), ld N
  // Row-major (r, c) = column-major (rows c, cols r, ld c).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.la, ab, uint64_t(b.shape[1]), uint64_t(b.shape[0]), b.shape[1]));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.lb, ab, uint64_t(a.shape[1]), uint64_t(a.shape[0]), a.shape[1]));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.lc, ct, uint64_t(key.N), uint64_t(key.M), key.N));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;  // b is cuBLASLt's A and a its B (row-major operands as column-major)
  const cublasStatus_t st = cublaslt_best_algo(plan.desc, plan.la, plan.lb, plan.lc, key.align_b, key.align_a,
                                               key.align_c, result, found);
  if (epi != GemmEpilogue::none && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
    plan.found = false;  // cached, so the fallback costs no further heuristic queries
    return g_plans.emplace(key, plan).first->second;
  }
  CUBLAS_CHECK(st);
  RT_CHECK(found > 0, "gemm: cuBLASLt has no algorithm for M=" << key.M << " N=" << key.N << " K=" << key.K << " "
                                                              << dtype_name(DType(key.ab_dtype)) << " -> "
                                                              << dtype_name(DType(key.c_dtype))
                                                              << "; check the shapes and 16-byte alignment of the operands");
  plan.algo = result.algo;
  plan.found = true;
  return g_plans.emplace(key, plan).first->second;
}

// The shape and dtype checks of gemm; returns M, N, K.
void check_gemm_args(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const char* op,
                     int64_t& M, int64_t& N, int64_t& K) {
  RT_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2,
           op << ": a " << a.shape_str() << ", b " << b.shape_str() << ", c " << c.shape_str() << " must be 2-D");
  M = trans_a ? a.shape[1] : a.shape[0], K = trans_a ? a.shape[0] : a.shape[1];
  const int64_t Kb = trans_b ? b.shape[1] : b.shape[0];
  N = trans_b ? b.shape[0] : b.shape[1];
  RT_CHECK(K == Kb, op << ": op(a) is (" << M << "," << K << ") but op(b) is (" << Kb << "," << N << ")");
  check_shape(c, {M, N}, op, "c (M,N)");
  RT_CHECK(a.dtype == b.dtype, op << ": a is " << dtype_name(a.dtype) << " but b is " << dtype_name(b.dtype)
                                  << "; cast one of them so both share a dtype");
  RT_CHECK(a.dtype == DType::bf16 || a.dtype == DType::f32, op << ": a and b must be bf16 or f32");
  RT_CHECK(c.dtype == DType::f32 || (c.dtype == DType::bf16 && a.dtype == DType::bf16),
           op << ": c is " << dtype_name(c.dtype) << " with " << dtype_name(a.dtype)
              << " inputs; supported: bf16 x bf16 -> f32 or bf16, f32 x f32 -> f32");
  require_dtype_on(a, a.dtype, c.device, op, "a");
  require_dtype_on(b, b.dtype, c.device, op, "b");
}

PlanKey make_key(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t M, int64_t N,
                 int64_t K) {
  PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in hashing
  key.M = M; key.N = N; key.K = K;
  key.device = c.device.index;
  key.ta = trans_a; key.tb = trans_b;
  key.ab_dtype = uint8_t(a.dtype); key.c_dtype = uint8_t(c.dtype);
  key.align_a = alignment_of(a.data); key.align_b = alignment_of(b.data); key.align_c = alignment_of(c.data);
  return key;
}

}  // namespace

bool gemm_epilogue_enabled(GemmEpilogue epilogue) {
  // RT_GEMM_EPILOGUES: unset or 1 = all, 0 = none, gelu_aux or dgelu = only that one. Read once.
  static const std::string allowed = [] {
    const char* v = std::getenv("RT_GEMM_EPILOGUES");
    return std::string(v ? v : "1");
  }();
  if (allowed == "1") return true;
  if (allowed == "gelu_aux") return epilogue == GemmEpilogue::gelu_aux;
  if (allowed == "dgelu") return epilogue == GemmEpilogue::dgelu;
  RT_CHECK(allowed == "0", "RT_GEMM_EPILOGUES=" << allowed << " is not one of 1 (all), 0 (none), gelu_aux, dgelu");
  return false;
}

bool gemm_with_epilogue(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, GemmEpilogue epilogue,
                        const Tensor& aux) {
  const char* op = "gemm (epilogue)";
  cudaStream_t stream = stream_for(c, op);
  int64_t M = 0, N = 0, K = 0;
  check_gemm_args(c, a, b, trans_a, trans_b, op, M, N, K);
  require_same_numel(aux, c, op, "aux", "c");
  RT_CHECK(aux.dtype == c.dtype, op << ": aux is " << dtype_name(aux.dtype) << " but c is " << dtype_name(c.dtype));
  require_dtype_on(aux, aux.dtype, c.device, op, "aux");
  if (epilogue == GemmEpilogue::none || !gemm_epilogue_enabled(epilogue) || M == 0 || N == 0 || K == 0 || N % 8 != 0)
    return false;  // the caller runs the unfused ops
  require_defined(c, op, "c");
  PlanKey key = make_key(c, a, b, trans_a, trans_b, M, N, K);
  key.epilogue = uint8_t(epilogue);
  key.align_aux = alignment_of(aux.data);
  const Plan& plan = plan_for(key, a, b, aux.data);
  if (!plan.found) return false;
  const void* aux_ptr = aux.data;  // the plan may have been built for another pointer of the same alignment
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                              sizeof(aux_ptr)));
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.desc, &alpha, b.data, plan.la, a.data, plan.lb, &beta, c.data,
                              plan.lc, c.data, plan.lc, &plan.algo, cublaslt_workspace(), cublaslt_workspace_bytes(),
                              stream));
  return true;
}

void gemm(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  const char* op = "gemm";
  cudaStream_t stream = stream_for(c, op);
  int64_t M = 0, N = 0, K = 0;
  check_gemm_args(c, a, b, trans_a, trans_b, op, M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // c = beta * c
    if (beta == 0.f) fill(c, 0.f);
    else if (beta != 1.f) scale_inplace(c, beta);
    return;
  }
  require_defined(c, op, "c");
  if (gemv_applies(c, a, b, trans_a, trans_b, M, K)) {  // one row (a decode step): gemv.cu
    gemv_rows(c, a, b, N, K, alpha, beta, stream);
    return;
  }
  const PlanKey key = make_key(c, a, b, trans_a, trans_b, M, N, K);
  const Plan& plan = plan_for(key, a, b);
  CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.desc, &alpha, b.data, plan.la, a.data, plan.lb, &beta, c.data,
                              plan.lc, c.data, plan.lc, &plan.algo, cublaslt_workspace(), cublaslt_workspace_bytes(),
                              stream));
}

}  // namespace cuda
}  // namespace rt
