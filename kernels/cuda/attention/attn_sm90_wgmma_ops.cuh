// Hopper (sm_90a) warpgroup MMA building blocks for the flash kernels: wgmma.mma_async wrappers (bf16 in, f32
// accumulate), the fence / commit / wait protocol, shared-memory matrix descriptors for the 128-byte swizzle,
// and a cp.async tile loader that writes that swizzle.
//
// Shared-memory layout ("sw128 tile"): a (ROWS, D) bf16 tile is stored as D/64 column blocks of (ROWS, 64);
// block c64 starts at c64 * ROWS * 128 bytes, row r of a block is 128 bytes at r * 128, and its 16-byte
// chunk c (0..7) sits at chunk position c ^ (r & 7). The tile base must be 1024-byte aligned: the hardware
// applies the swizzle to address bits [4,7) ^ [7,10).
//   * As a K-major operand (rows = M or N, the 64 columns of a block = K): SBO = 1024 (next 8 rows),
//     LBO unused; a k16 step inside a block advances the start address by 32 bytes.
//   * As an MN-major operand (rows = K, columns = N): SBO = 1024 (next 8 K rows), LBO = ROWS * 128 (next
//     block of 64 N columns); a k16 step advances the start address by 16 rows = 2048 bytes.
// Every wgmma here must be compiled for sm_90a only; callers guard kernel bodies with
// RT_WGMMA_AVAILABLE. Keep C++17.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RT_WGMMA_AVAILABLE 1
#else
#define RT_WGMMA_AVAILABLE 0
#endif

namespace rt {
namespace cuda {

// Byte offset of (row, 16-byte chunk along D) in a sw128 tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ uint32_t sw128_offset(int row, int chunk) {
  return uint32_t((chunk >> 3) * (ROWS * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

template <int ROWS>
struct Sw128Offset {
  __device__ __forceinline__ uint32_t operator()(int row, int chunk) const { return sw128_offset<ROWS>(row, chunk); }
};

// Loads rows [0, ROWS) of a sw128 tile with cp.async (load_rows_async, attention_common.cuh).
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile_sw128_async(uint32_t tile, const __nv_bfloat16* src, int64_t stride,
                                                      int64_t row0, int64_t valid_rows) {
  load_rows_async<ROWS, D, THREADS>(tile, src, stride, row0, valid_rows, Sw128Offset<ROWS>{});
}

// Shared-memory matrix descriptor for a 128-byte-swizzled operand (layout type 1 in bits 62-63).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// Orders this thread's generic-proxy shared-memory writes (cp.async, st.shared) before later async-proxy
// reads (wgmma operands). Use after the writes land and before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Before the first wgmma of a batch whose accumulator or A registers were written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ties registers to the asm stream so the compiler does not move their reads or writes across a
// wgmma issue / wait (asm volatile statements keep their order).
template <int N>
__device__ __forceinline__ void wgmma_fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for packed bf16 register operands (P, dS as A fragments).
template <int N>
__device__ __forceinline__ void fence_regs_u32(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The value, hidden from the optimizer so that descriptors built from it are rebuilt where used instead of
// being hoisted out of the main loop into registers.
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}

// The accumulator operands of a wgmma with 32 or 64 f32 per thread: the instruction's register list ("%0, ...")
// and the matching read-write constraints on d[0..N).
#define RT_WGMMA_D32_REGS                                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define RT_WGMMA_D64_REGS                                                         \
  RT_WGMMA_D32_REGS ", "                                                          \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define RT_WGMMA_D32_OUT(d)                                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define RT_WGMMA_D64_OUT(d)                                                                                      \
  RT_WGMMA_D32_OUT(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]),     \
      "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),     \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),     \
      "+f"(d[63])

// d (64 x 128 f32 per warpgroup, 64 per thread) = (accumulate ? d : 0) + A * B^T where A (64 x 16) and
// B^T (16 x 128) are bf16 in shared memory, both K-major (rows of A and of B hold the 16 K values).
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a_desc, uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      RT_WGMMA_D64_REGS
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : RT_WGMMA_D64_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (64 x 128 f32 per warpgroup, 64 per thread) += A * B where A (64 x 16 bf16) is in registers (this warp's
// 16 rows as the mma.m16n8k16 A fragment a0..a3) and B (16 x 128 bf16) is MN-major in shared memory (each of
// the 16 K rows holds 128 contiguous N values; transpose bit set).
__device__ __forceinline__ void wgmma_m64n128k16_rs_bmn(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                     uint32_t a3, uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      RT_WGMMA_D64_REGS
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : RT_WGMMA_D64_OUT(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b_desc), "r"(1));
}

// d (64 x 64 f32 per warpgroup, 32 per thread) += A * B where A (64 x 16 bf16) is in registers (this warp's
// 16 rows as the mma.m16n8k16 A fragment a0..a3) and B (16 x 64 bf16) is MN-major in shared memory (each of
// the 16 K rows holds 64 contiguous N values; transpose bit set).
__device__ __forceinline__ void wgmma_m64n64k16_rs_bmn(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                                     uint32_t a3, uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      RT_WGMMA_D32_REGS
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b_desc), "r"(1));
}

// d (64 x 64 f32 per warpgroup, 32 per thread) = (accumulate ? d : 0) + A * B^T where A (64 x 16) and
// B^T (16 x 64) are bf16 in shared memory, both K-major (rows of A and of B hold the 16 K values).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t a_desc, uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      RT_WGMMA_D32_REGS
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (64 x 64 f32 per warpgroup, 32 per thread) = (accumulate ? d : 0) + A * B where A (64 x 16) and B (16 x 64)
// are bf16 in shared memory, both MN-major (each of the 16 K rows holds 64 contiguous M, resp. N, values;
// both transpose bits set).
__device__ __forceinline__ void wgmma_m64n64k16_ss_mn(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                                      int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      RT_WGMMA_D32_REGS
      "}, %32, %33, p, 1, 1, 1, 1;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// Whether a wgmma kernel can run on `device`: compute capability 9.0, and the image the runtime picks for it
// is sm_90a SASS compiled from compute_90a PTX (a JIT-compiled compute_80 image would run the kernel's __trap()
// body). `kernel` is the kernel's address; queried on the current device, which stream_for() has set to `device`.
inline bool wgmma_kernel_runs_on(int device, const void* kernel) {
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attr;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  return attr.binaryVersion == 90 && attr.ptxVersion == 90;
}

}  // namespace cuda
}  // namespace rt
