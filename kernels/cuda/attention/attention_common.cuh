// Shape checks and mask resolution shared by the CUDA attention ops (kernels/cuda/attn_*.cu), plus the
// tensor-core building blocks of the flash kernels: cp.async, ldmatrix, mma.sync m16n8k16 bf16.
// Shared-memory tiles are rows of D bf16 split into 16-byte chunks; chunk c of row r is stored at chunk
// c ^ (r & 7) so that the 8 rows an ldmatrix phase reads fall in distinct banks.
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention_shapes.h"
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline void require_attn_tensor(const Tensor& t, DType dtype, const Device& dev, const char* op, const char* arg) {
  require_dtype_on(t, dtype, dev, op, arg);
  RT_CHECK(reinterpret_cast<uintptr_t>(t.data) % 16 == 0,
           op << ": " << arg << " must be 16-byte aligned (allocate it from an Arena)");
}

// q (B,Nq,H,D), k and v (B,Nk,Hkv,D): bf16 on one CUDA device, D in {64, 128}.
inline AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(d.D == 64 || d.D == 128, op << ": head dim " << d.D
                                       << " is not supported by the CUDA flash kernels (64 or 128); change "
                                          "model.d_model / model.n_head, or run on device: cpu");
  require_attn_tensor(q, DType::bf16, q.device, op, "q");
  require_attn_tensor(k, DType::bf16, q.device, op, "k");
  require_attn_tensor(v, DType::bf16, q.device, op, "v");
  RT_CHECK(d.B <= 65535 && d.H <= 65535, op << ": B=" << d.B << " and H=" << d.H << " must be at most 65535");
  return d;
}

// ---- tensor-core building blocks -----------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low 16 bits)
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Byte offset of (row, 16-byte chunk) in a swizzled tile whose rows are D bf16 (D/8 chunks).
template <int D>
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return uint32_t(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

// Loads rows [0, ROWS) of a tile with cp.async: tile row r comes from src + (row0 + r) * stride elements
// when row0 + r < valid_rows, and is zero-filled otherwise. THREADS threads take part. `chunk_offset(r, c)`
// is the byte offset of 16-byte chunk c of tile row r: the tile's swizzle.
template <int ROWS, int D, int THREADS, typename ChunkOffset>
__device__ __forceinline__ void load_rows_async(uint32_t tile, const __nv_bfloat16* src, int64_t stride,
                                                int64_t row0, int64_t valid_rows, ChunkOffset chunk_offset) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kTotal = ROWS * kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
  for (int it = 0; it < kTotal / THREADS; ++it) {
    const int idx = it * THREADS + int(threadIdx.x);
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t grow = row0 + r;
    const bool ok = grow < valid_rows;
    const __nv_bfloat16* p = ok ? src + grow * stride + c * 8 : src;  // src itself is valid for the zero-fill
    cp_async_16(tile + chunk_offset(r, c), p, ok ? 16 : 0);
  }
}

// The row-major tile of tile_offset (chunk c of row r at chunk c ^ (r & 7)).
template <int D>
struct RowXorOffset {
  __device__ __forceinline__ uint32_t operator()(int row, int chunk) const { return tile_offset<D>(row, chunk); }
};

template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const __nv_bfloat16* src, int64_t stride,
                                                int64_t row0, int64_t valid_rows) {
  load_rows_async<ROWS, D, THREADS>(tile, src, stride, row0, valid_rows, RowXorOffset<D>{});
}

// ---- dQ accumulation of the backward kernels --------------------------------------------------------

__device__ __forceinline__ void atomic_add_f32x2(float* addr, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A reduction (no value returned), so the issuing thread never waits for the add to be performed.
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(x), "f"(y) : "memory");
#else
  atomicAdd(addr, x);
  atomicAdd(addr + 1, y);
#endif
}

// Deterministic mode (attn_bwd_sm80.cu): the CTA of key tile `mine` adds into a query tile's dQ rows only
// when the tile's turn counter reads `mine`. dq_turn_wait: thread 0 spins (acquire), then the whole CTA
// proceeds; ordered_add_f32x2: the add itself, plain L2 loads and stores; dq_turn_pass: fence, barrier, and
// thread 0 hands the turn to mine + 1 (release). Every thread of the CTA must call wait and pass.
__device__ __forceinline__ void dq_turn_wait(const int* turn, int mine) {
  if (threadIdx.x == 0) {
    int seen;
    do {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
    } while (seen != mine);
  }
  __syncthreads();
}
__device__ __forceinline__ void ordered_add_f32x2(float* addr, float x, float y) {
  float2* d2 = reinterpret_cast<float2*>(addr);
  float2 v = __ldcg(d2);
  v.x += x, v.y += y;
  __stcg(d2, v);
}
__device__ __forceinline__ void dq_turn_pass(int* turn, int mine) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(turn), "r"(mine + 1) : "memory");
}

}  // namespace cuda
}  // namespace rt
