// Hopper (sm_90a) asynchronous-copy building blocks for warp-specialized kernels: mbarrier wrappers (init,
// arrive, arrive with an expected transaction count, parity wait), TMA tensor loads (cp.async.bulk.tensor 2D-5D
// into shared memory, completing on an mbarrier), the generic -> async proxy fence, setmaxnreg, named
// barriers, and a HOST helper that encodes a CUtensorMap for a bf16 tensor with the 128-byte swizzle of the
// wgmma sw128 tiles (attn_sm90_wgmma_ops.cuh).
//
// All shared-memory addresses are 32-bit shared-window addresses (smem_addr() in attention_common.cuh).
// Device code using TMA / setmaxnreg must be guarded by RT_WGMMA_AVAILABLE (sm_90a) like the wgmma code.
// The encoder is reached through the runtime (cudaGetDriverEntryPointByVersion, the non-deprecated form of
// cudaGetDriverEntryPoint), so nothing links libcuda directly. Keep C++17.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only; no driver symbol is linked)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>

#include "kernels/cuda/check.h"

namespace rt {
namespace cuda {

// ---- mbarrier ---------------------------------------------------------------------------------------

// Initializes the 8-byte mbarrier at `bar` (8-byte aligned shared memory) for `count` arrivals per phase.
// One thread initializes; publish with mbar_init_fence() and a CTA barrier before any other thread or TMA
// touches it.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async proxy (TMA complete_tx).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival on the current phase.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival per warp, for a barrier initialized with one count per arriving warp: the warp converges first (so
// every lane is past what the arrival releases), then lane 0 arrives. In a loop with wgmmas in flight across it,
// ptxas may serialize the wgmmas (C7513: it did in fwd v5); check ptxas -v after using it.
__device__ __forceinline__ void mbar_arrive_warp(uint32_t bar) {
  __syncwarp();
  if ((threadIdx.x & 31u) == 0) mbar_arrive(bar);
}
// One arrival that also announces `bytes` of transactions (TMA loads) the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// True once the phase with parity `parity` (0 or 1) has completed.
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits until the phase with parity `parity` has completed (try_wait suspends for a while in hardware). The
// retry loop is inside the asm (labels are local to the braces), so the compiler sees straight-line code.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nRT_MBAR_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra RT_MBAR_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA loads --------------------------------------------------------------------------------------

// Loads one box of the tensor described by `tmap` (a __grid_constant__ kernel parameter or a tensor map in
// global memory) at element coordinates c0 (innermost) .. into shared memory at `dst`; the bytes complete
// on `bar` (announce them first with mbar_arrive_expect_tx). Elements outside the tensor read as zero.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* tmap, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* tmap, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* tmap, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* tmap, uint32_t bar, int c0, int c1,
                                            int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, %7}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
// Fetches the tensor map descriptor into the cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA, wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- registers and barriers of warp-specialized kernels ---------------------------------------------

// Raises (inc) or lowers (dec) this warpgroup's per-thread register allocation to N (a multiple of 8 in
// [24, 256]); every thread of the warpgroup executes it.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32): sync waits for
// the count, arrive only contributes to it.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- host: tensor map encoding ----------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver, looked up once through the runtime.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    RT_CHECK(q == cudaDriverEntryPointSuccess && f != nullptr,
             "cuTensorMapEncodeTiled not found in the CUDA driver (query result "
                 << int(q) << "); TMA kernels need a driver for CUDA 12.0 or newer");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tensor map for a bf16 or f32 tensor of `rank` (2..5) dims for TMA transfers of (box rows) x 128-byte column
// blocks with the 128-byte swizzle (for bf16 the sw128 layout of attn_sm90_wgmma_ops.cuh: one box = one (rows, 64)
// column block, row r at r * 128 bytes, 16-byte chunk c at c ^ (r & 7); the shared-memory side must be
// 1024-byte aligned).
//   dims[0..rank): extents in elements, dims[0] innermost and contiguous;
//   strides_bytes[0..rank-1): byte strides of dims 1..rank-1 (multiples of 16);
//   box[0..rank): box extents; box[0] must span 128 bytes (64 bf16 or 32 f32), every box[i] <= 256.
// Elements outside dims (e.g. rows past a range end made the extent) read as zero and are not written.
inline CUtensorMap make_tma_map_sw128(CUtensorMapDataType type, uint32_t elem_bytes, const void* base, int rank,
                                      const uint64_t* dims, const uint64_t* strides_bytes, const uint32_t* box) {
  RT_CHECK(rank >= 2 && rank <= 5, "make_tma_map_sw128: rank " << rank << " is not in 2..5");
  RT_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0,
           "make_tma_map_sw128: base must be 16-byte aligned (a view at an offset that is not a multiple of 16 bytes: "
           "pass a contiguous tensor)");
  RT_CHECK(box[0] * elem_bytes == 128, "make_tma_map_sw128: the inner box extent must span 128 bytes, got "
                                           << box[0] << " elements of " << elem_bytes << " bytes");
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t bdim[5], estride[5];
  for (int i = 0; i < rank; ++i) {
    RT_CHECK(dims[i] >= 1 && dims[i] <= (uint64_t(1) << 32), "make_tma_map_sw128: dim " << i << " = " << dims[i]
                                                                                     << " out of range");
    RT_CHECK(box[i] >= 1 && box[i] <= 256, "make_tma_map_sw128: box " << i << " = " << box[i]
                                                                      << " out of range 1..256");
    gdim[i] = dims[i];
    bdim[i] = box[i];
    estride[i] = 1;
  }
  for (int i = 0; i + 1 < rank; ++i) {
    RT_CHECK(strides_bytes[i] % 16 == 0 && strides_bytes[i] < (uint64_t(1) << 40),
             "make_tma_map_sw128: stride " << i << " = " << strides_bytes[i]
                                           << " bytes must be a multiple of 16 below 2^40");
    gstride[i] = strides_bytes[i];
  }
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, type, cuuint32_t(rank), const_cast<void*>(base), gdim, gstride, bdim,
                                          estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  RT_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " << int(r) << " (rank " << rank
                                                                             << ", dims[0] " << dims[0] << ", box "
                                                                             << box[0] << " x " << box[1] << ")");
  return map;
}

inline CUtensorMap make_tma_map_bf16_sw128(const void* base, int rank, const uint64_t* dims,
                                           const uint64_t* strides_bytes, const uint32_t* box) {
  return make_tma_map_sw128(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rank, dims, strides_bytes, box);
}

// A 4-D tensor map over a (B, rows, heads, D) bf16 activation tensor (q, k, v, dO) whose row extent is cut at
// `rows_end` (rows at or past it read as zero), boxes of (box_rows, 64 columns) of one head: dims innermost first
// (D, heads, rows, B). Load coordinates: (column, head, row, batch).
// elem_bytes 2: bf16 (boxes of 64 columns); 4: f32 (boxes of 32 columns, e.g. the backward's dQ accumulator).
inline CUtensorMap make_rows_heads_tma_map(const void* base, int64_t B, int64_t rows_total, int64_t rows_end,
                                           int64_t heads, int64_t D, uint32_t box_rows, uint32_t elem_bytes = 2) {
  const uint64_t e = elem_bytes;
  const uint64_t dims[4] = {uint64_t(D), uint64_t(heads), uint64_t(rows_end), uint64_t(B)};
  const uint64_t strides[3] = {uint64_t(D) * e, uint64_t(heads * D) * e, uint64_t(rows_total * heads * D) * e};
  const uint32_t box[4] = {128 / elem_bytes, 1, box_rows, 1};
  return make_tma_map_sw128(elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            elem_bytes, base, 4, dims, strides, box);
}

}  // namespace cuda
}  // namespace rt

// --- used by the backward (bwd v5's dQ warp, attn_bwd_sm90ws_dq_warp.cuh): TMA tensor reduce shared -> global ---
namespace rt {
namespace cuda {

// Adds the box at `src` (the sw128 layout of the tensor map `tmap`) into the f32 tensor at element coordinates
// (c0 innermost, c1, c2, c3); elements outside the tensor's extents are skipped. The threads that wrote `src`
// run fence_proxy_async() before the barrier that hands the buffer to the issuing thread.
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap* tmap, uint32_t src, int c0, int c1, int c2,
                                                  int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// As tma_reduce_add_4d, storing the box instead of adding it.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* tmap, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// Closes this thread's bulk group of the operations issued since the last commit.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's bulk groups are incomplete (their global writes performed).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's async-proxy global accesses (bulk reduces) with its generic-proxy ones.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

}  // namespace cuda
}  // namespace rt
