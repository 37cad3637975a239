// FP8 attention backward (issue 47; `fp8.attention: true` with `train.precision: fp8`): the ops, their scale
// groups, and the host quantizers every backend reproduces. The recipe is bench/NOTES.md "FP8 attention numerics,
// emulated": the forward stays in the activation dtype (E4M3 puts O at 4.4-4.8e-2 relative RMS whatever the
// scaling, over the 1.5e-2); the backward runs dV, dQ and dK in FP8, dP = dO V^T and the recompute of S not.
//
// attn_bwd_block_fp8 has exactly attn_bwd_block's contract (kernels/op_list.inc: q (B,Nq,H,D), k and v
// (B,Nk,Hkv,D), dout (B,Nq,H,D), lse and delta (B,H,Nq) f32, dq_acc (B,Nq,H,D) and dk_acc, dv_acc (B,Nk,Hkv,D) f32
// accumulated, the same mask), except that three of its five products take E4M3 operands:
//   dV += P^T dO     P (E4M3, P x 448)            dO (E4M3, per row block)
//   dK += dS^T Q     dS (E4M3, per 128x128 tile)  Q (E4M3, per row block)
//   dQ += dS K       dS (the same codes)          K (E4M3, per row block)
// and S = Q K^T, dP = dO V^T take the unquantized operands. Scale groups (s = fp8_scale_from_amax(amax), the code
// float_to_e4m3(x * s), the factor fp8_factor_from_scale(s) = 1 / s: kernels/fp8.h's rule, NaN in a group makes
// its factor NaN):
//   - row block: the kAttnFp8RowBlock = 128 rows [128 r, 128 r + 128) of the tensor as passed (row 0 = the tensor's
//     row 0, not the mask's q_begin / k_begin) x all D columns of one head of one sample: Q and dO per (b, h, r),
//     K per (b, hk, r) (shared by the H / Hkv query heads of the group). Rows outside the mask's ranges count in
//     their block's amax: the groups are what a quantizer fused into the producer (RoPE, the QKV epilogue) sees.
//   - P: s = fp8_scale_from_amax(1) = 448 (kAttnFp8PScale) for every tile: P <= 1, so no amax is taken and small
//     probabilities stay above E4M3's subnormals (2^-9 / 448 ~ 4e-6 is the smallest nonzero P kept).
//   - dS (= P (dP - delta) / sqrt(D)): one amax per tile of query rows [i0, i1) x keys [j0, j1) of one (b, h),
//     where the tiles are the 128-aligned row blocks above clipped to the mask's ranges (128 x 128 where not
//     clipped); masked and empty pairs are 0 in the tile.
// Every scale is constant along each product's contraction within a tile (dV and dK contract over the tile's
// query rows, one Q / dO row block; dQ over the tile's keys, one K row block), so a kernel applies the factors to
// its f32 tile accumulator: out += (factor_a x factor_b) x sum(code_a code_b). That is what the CPU backend
// computes: each tile product in f32 on the E4M3 values, scaled once, added to the f32 accumulator. Accumulation
// is f32 throughout.
//
// dP and S: f32 on the CPU (its attention ops take f32 tensors, DESIGN.md "Numerics": the CPU path is fp32
// throughout), bf16 operands on a GPU (its tensors are bf16). Rounding the CPU's f32 operands to bf16 would add
// ~3e-3 to dS, invisible beside the FP8 products' ~3.7e-2; the CPU keeps f32, as its FP8 linear layers do.
// Expected error against fp64 (the numpy study; tests/unit/kernels/test_attn_bwd_fp8_cpu.cpp measures the C++):
// dQ, dK, dV 3.6-3.8e-2 relative RMS on N(0,1) inputs, under the 4e-2.
//
// Head dims: 64 and 128 only (the FP8 GPU kernel's tiles; the CPU refuses the others too, so a CPU rank refuses
// what a GPU rank would). CUDA tensors are refused: no CUDA kernel yet.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/fp8.h"

namespace rt {

constexpr int64_t kAttnFp8RowBlock = 128;  // rows of a Q / K / dO scale group, and of a dS tile's side
constexpr float kAttnFp8PScale = 448.f;    // P's multiplier before its cast (fp8_scale_from_amax(1))

// The backward of one K/V block with dV, dQ, dK in FP8: attn_bwd_block's contract (above).
void attn_bwd_block_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                        const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask);
// attn_bwd_block_fresh's contract: dk, dv (B,Nk,Hkv,D) f32 overwritten (rows outside the key range zero), dq_acc
// accumulates. The same as fill(dk, 0), fill(dv, 0), attn_bwd_block_fp8.
void attn_bwd_block_fresh_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                              const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask);
// attn_bwd_block_fresh_two_kv's contract: attn_bwd_block_fresh_fp8 over k, v then over k2, v2 (k_pos advanced past
// the gap). Each source's K row blocks start at its own row 0.
void attn_bwd_block_fresh_two_kv_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                     const Tensor& v2, const Tensor& dout, const Tensor& lse, const Tensor& delta,
                                     Tensor dq_acc, Tensor dk, Tensor dv, Tensor dk2, Tensor dv2,
                                     const AttnMask& mask);

// True for the head dims the FP8 attention takes: 64 and 128.
bool attn_fp8_head_dim_supported(int64_t D);

// ---- the host quantizers (the CPU backend runs these; a GPU kernel must give the same codes) ----
// The E4M3 value of a code (e4m3_to_float through a 256-entry table).
float e4m3_value(uint8_t code);

// One operand head slice x (rows, D), row r at x + r * row_stride, quantized per row block:
//   values (rows, D) contiguous: e4m3_value(float_to_e4m3(x * s_blk)), the E4M3 value of each code (unscaled);
//   factors (ceil(rows / 128)): 1 / s_blk of each block.
void attn_fp8_quantize_row_blocks(const float* x, int64_t rows, int64_t row_stride, int64_t D, float* values,
                                  float* factors);
// A tile x (rows, cols), row r at x + r * ld, quantized in place with multiplier s (its E4M3 values, unscaled).
void attn_fp8_quantize_tile(float* x, int64_t rows, int64_t cols, int64_t ld, float s);
// The amax of a tile (rows, cols) (fp8_amax_join: NaN once any element is NaN).
float attn_fp8_tile_amax(const float* x, int64_t rows, int64_t cols, int64_t ld);

}  // namespace rt
