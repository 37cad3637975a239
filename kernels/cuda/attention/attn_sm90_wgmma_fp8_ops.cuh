// Hopper (sm_90a) warpgroup MMA with E4M3 operands and f32 accumulators, for the FP8 attention forward
// (attn_fwd_fp8_sm90.cu): wgmma.mma_async m64n128k32 .f32.e4m3.e4m3, A from shared memory or from registers, B from
// shared memory. The fence / commit / wait protocol, descriptors and accumulator register lists are the bf16 ones
// (attn_sm90_wgmma_ops.cuh).
//
// 8-bit operands have no transpose: A and B must both be K-major (each row of M, resp. N, holds its K values
// contiguously). A "sw128 fp8 tile" (ROWS, 128) e4m3 is ROWS rows of 128 bytes, the 16-byte chunk c of row r at
// chunk position c ^ (r & 7) (the same 128-byte swizzle as the bf16 tiles; 1024-byte aligned base). As an operand:
// SBO = 1024 (the next 8 rows), LBO unused; a k32 step (32 bytes) advances the start address by 32 bytes, so the 4
// steps of a 128-byte row stay inside one swizzle atom.
//
// A from registers (the m64nNk32 8-bit A fragment): thread (warp w, lane 4g + t) of the warpgroup holds rows
// 16w + g and 16w + g + 8 of the 64 x 32 A tile: a0 = row g, k 4t .. 4t+3; a1 = row g+8, k 4t .. 4t+3; a2 = row g,
// k 16+4t .. 16+4t+3; a3 = row g+8, k 16+4t .. 16+4t+3; the lowest byte of each register is the lowest k.
// Keep C++17; compile for sm_90a only (callers guard bodies with RT_WGMMA_AVAILABLE).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {

// d (64 x 128 f32 per warpgroup, 64 per thread) = (accumulate ? d : 0) + A B^T: A (64 x 32) and B^T's rows (128 x
// 32) e4m3 in shared memory, both K-major.
__device__ __forceinline__ void wgmma_m64n128k32_ss_e4m3(float (&d)[64], uint64_t a_desc, uint64_t b_desc,
                                                         int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      RT_WGMMA_D64_REGS
      "}, %64, %65, p, 1, 1;\n}\n"
      : RT_WGMMA_D64_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (64 x 128 f32 per warpgroup, 64 per thread) += A B^T: A (64 x 32 e4m3) in registers (the fragment above), B^T's
// rows (128 x 32 e4m3) K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k32_rs_e4m3(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                         uint32_t a3, uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      RT_WGMMA_D64_REGS
      "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : RT_WGMMA_D64_OUT(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b_desc), "r"(1));
}

// Four f32 to E4M3 codes in one register, round to nearest even, saturating: bytes 0..3 from x0..x3 (cvt puts its
// first source in the upper byte of each pair). Only for values that are not NaN (the softmax's probabilities). One
// asm block with a 32-bit result, so that the A register is written once.
__device__ __forceinline__ uint32_t cvt_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

}  // namespace cuda
}  // namespace rt
