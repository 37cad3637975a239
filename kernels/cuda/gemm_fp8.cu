// gemm_fp8 on CUDA (kernels/op_list.inc): c (M,N) = dequant(a) (M,K) @ dequant(b)^T + beta * c through cuBLASLt's
// FP8 matmul with per-operand scale modes (SCALAR_32F, OUTER_VEC_32F, VEC128_32F, BLK128x128_32F).
// cuBLASLt is column-major, so it computes c^T (N,M) = b (N,K) x a^T: its A is our b (a column-major (K,N) matrix
// taken transposed: "TN", the only FP8 layout Hopper runs) and its B is our a. Its scale vectors and blocks follow
// its A / B, so b's factors go to the A scale and a's to the B scale; the layouts of kernels/fp8.h
// (fp8_scale_shape) are the ones cuBLASLt reads. Plans are cached per shape, scalings, dtype, beta, fast
// accumulation and alignment, as kernels/cuda/gemm.cu does. gemm_fp8_with_epilogue (kernels/cuda/gemm_fp8_epilogue.h)
// adds the GELU_AUX epilogue for gemm_fp8_gelu.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_algo.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/gemm_fp8_epilogue.h"

namespace rt {
namespace cuda {

void require_fp8_gpu(const char* op) {
  const cudaDeviceProp& p = device_props();
  RT_CHECK(p.major * 10 + p.minor >= 89,
           op << ": this GPU (" << p.name << ", sm_" << p.major << p.minor
              << ") has no FP8 tensor cores; FP8 needs sm_89 or newer (Ada, Hopper). Set train.precision: bf16");
}

namespace {

struct PlanKey {
  int64_t M, N, K;
  int device;
  uint8_t a_scaling, b_scaling, c_dtype, accumulate, fast_accum;
  uint8_t epilogue;  // GemmEpilogue
  uint16_t align_a, align_b, align_c, align_aux;
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
  bool found = true;  // false: no algorithm for this epilogue (cached; the caller falls back)
};
std::mutex g_mutex;
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

uint16_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint16_t align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

int32_t lt_scale_mode(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::tensor: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case Fp8Scaling::row: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case Fp8Scaling::block_1x128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case Fp8Scaling::block_128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

bool is_block(Fp8Scaling s) { return s == Fp8Scaling::block_1x128 || s == Fp8Scaling::block_128x128; }

// Builds (once) the plan for one problem: layouts, scale modes and pointers, fast accumulation, and the epilogue with
// its aux (laid out as c). With an epilogue a missing algorithm is cached as found = false (the caller falls back).
const Plan& plan_for(const PlanKey& key, const void* a_scale, const void* b_scale, const void* aux = nullptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  Plan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const int32_t mode_a = lt_scale_mode(Fp8Scaling(key.b_scaling)), mode_b = lt_scale_mode(Fp8Scaling(key.a_scaling));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                              sizeof(b_scale)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                              sizeof(a_scale)));
  if (key.fast_accum) {
    const int8_t fast = 1;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  cublaslt_set_epilogue(plan.desc, GemmEpilogue(key.epilogue), aux, key.N);  // aux as c: column-major (N, M), ld N
  const cudaDataType_t ct = DType(key.c_dtype) == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // Row-major (r, K) = column-major (K rows, r columns, ld K).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.la, CUDA_R_8F_E4M3, uint64_t(key.K), uint64_t(key.N), key.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.lb, CUDA_R_8F_E4M3, uint64_t(key.K), uint64_t(key.M), key.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.lc, ct, uint64_t(key.N), uint64_t(key.M), key.N));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;  // b is cuBLASLt's A and a its B (row-major operands as column-major)
  const cublasStatus_t st = cublaslt_best_algo(plan.desc, plan.la, plan.lb, plan.lc, key.align_b, key.align_a,
                                               key.align_c, result, found);
  if (GemmEpilogue(key.epilogue) != GemmEpilogue::none && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
    plan.found = false;
    return g_plans.emplace(key, plan).first->second;
  }
  const cudaDeviceProp& p = device_props();
  RT_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
           "gemm_fp8: cuBLASLt has no FP8 algorithm for M=" << key.M << " N=" << key.N << " K=" << key.K << ", a "
               << fp8_scaling_name(Fp8Scaling(key.a_scaling)) << " x b " << fp8_scaling_name(Fp8Scaling(key.b_scaling))
               << " -> " << dtype_name(DType(key.c_dtype)) << (key.accumulate ? " (accumulating)" : "") << " on "
               << p.name << " (sm_" << p.major << p.minor << ", cuBLAS status " << int(st)
               << "); block scalings run on sm_90 only: use fp8.recipe: tensorwise or rowwise on this GPU, or check "
                  "the operands' 16-byte alignment");
  plan.algo = result.algo;
  return g_plans.emplace(key, plan).first->second;
}

// The checks gemm_fp8 makes, for c (M,N) = a (M,K) . b (N,K)^T; returns the plan key (no epilogue) or M, N == 0.
PlanKey checked_key(const Tensor& c, const Fp8Operand& a, const Fp8Operand& b, float beta, bool fast_accum,
                    const char* op) {
  require_fp8_gpu(op);
  RT_CHECK(c.ndim == 2 && a.data.ndim == 2 && b.data.ndim == 2,
           op << ": c " << c.shape_str() << ", a " << a.data.shape_str() << ", b " << b.data.shape_str()
              << " must be 2-D");
  RT_CHECK(c.dtype == DType::f32 || c.dtype == DType::bf16,
           op << ": c is " << dtype_name(c.dtype) << "; the FP8 GEMM writes f32 or bf16");
  require_defined(c, op, "c");
  const int64_t M = c.shape[0], N = c.shape[1], K = a.data.shape[1];
  check_fp8_operand(a, M, K, c.device, op, "a");
  check_fp8_operand(b, N, K, c.device, op, "b");
  RT_CHECK(beta == 0.f || beta == 1.f, op << ": beta is " << beta << "; 0 (overwrite) or 1 (accumulate)");
  check_fp8_gemm_tiling(a.scaling, b.scaling, M, N, K, op);
  PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in hashing
  key.M = M, key.N = N, key.K = K, key.device = c.device.index;
  key.a_scaling = uint8_t(a.scaling), key.b_scaling = uint8_t(b.scaling), key.c_dtype = uint8_t(c.dtype);
  key.accumulate = beta != 0.f;
  key.fast_accum = fast_accum && !is_block(a.scaling);  // block-scaled kernels always promote
  key.align_a = alignment_of(a.data.data), key.align_b = alignment_of(b.data.data);
  key.align_c = alignment_of(c.data);
  return key;
}

void run(const Plan& plan, Tensor c, const Fp8Operand& a, const Fp8Operand& b, float beta, cudaStream_t stream) {
  const void* a_scale = a.scale.data;
  const void* b_scale = b.scale.data;
  // The plan may have been built for other factor tensors of the same shape.
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                              sizeof(b_scale)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                              sizeof(a_scale)));
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.desc, &alpha, b.data.data, plan.la, a.data.data, plan.lb, &beta,
                              c.data, plan.lc, c.data, plan.lc, &plan.algo, cublaslt_workspace(),
                              cublaslt_workspace_bytes(), stream));
}

}  // namespace

bool gemm_fp8_with_epilogue(Tensor c, const Fp8Operand& a, const Fp8Operand& b, bool fast_accum,
                            GemmEpilogue epilogue, const Tensor& aux) {
  const char* op = "gemm_fp8 (epilogue)";
  cudaStream_t stream = stream_for(c, op);
  PlanKey key = checked_key(c, a, b, 0.f, fast_accum, op);
  require_same_numel(aux, c, op, "aux", "c");
  RT_CHECK(aux.dtype == c.dtype, op << ": aux is " << dtype_name(aux.dtype) << " but c is " << dtype_name(c.dtype));
  require_dtype_on(aux, aux.dtype, c.device, op, "aux");
  if (epilogue == GemmEpilogue::none || !gemm_epilogue_enabled(epilogue) || key.M == 0 || key.N == 0 ||
      key.K == 0 || key.N % 8 != 0)
    return false;  // the caller runs the unfused ops
  key.epilogue = uint8_t(epilogue), key.align_aux = alignment_of(aux.data);
  const Plan& plan = plan_for(key, a.scale.data, b.scale.data, aux.data);
  if (!plan.found) return false;
  const void* aux_ptr = aux.data;  // the plan may have been built for other pointers of the same alignment
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                              sizeof(aux_ptr)));
  run(plan, c, a, b, 0.f, stream);
  return true;
}

void gemm_fp8(Tensor c, const Fp8Operand& a, const Fp8Operand& b, float beta, bool fast_accum) {
  const char* op = "gemm_fp8";
  cudaStream_t stream = stream_for(c, op);
  const PlanKey key = checked_key(c, a, b, beta, fast_accum, op);
  if (key.M == 0 || key.N == 0) return;
  if (key.K == 0) {
    if (beta == 0.f) fill(c, 0.f);
    return;
  }
  run(plan_for(key, a.scale.data, b.scale.data), c, a, b, beta, stream);
}

}  // namespace cuda
}  // namespace rt
