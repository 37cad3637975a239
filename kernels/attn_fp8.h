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
// Head dims: 64 and 128 on the CPU (the CPU refuses the others).
//
// On CUDA tensors (kernels/attn_fp8_gpu.cpp) attn_bwd_block_fp8 and attn_bwd_block_fresh_fp8 (fill dk, dv with 0,
// then the block op) run the sm_90a kernel of kernels/attn_bwd_fp8.h, which computes this recipe for causal or full
// masks with offsets and row ranges: a single-rank call and every block of a cp > 1 ring without packed documents.
// A call is in its scope (attn_fp8_cuda_out_of_scope returns "", the kernel's own attn_bwd_fp8_cuda_supports) when it
// has no documents, D = 128 and Nq, Nk positive multiples of 128; q, k, v, dout bf16 on an H100 / H200. Everything
// else on CUDA (documents, D = 64, the two_kv form) is refused with the reason and the fix; config validation refuses
// those configs at start-up (framework/config/config_validate.cpp check_fp8_attention). The CUDA path's codes live
// in a workspace the caller owns (attn_fp8_bwd_workspace_bytes, from its arena) and names with an
// AttnFp8BwdWorkspaceScope around its calls: no allocation and no host wait per call.
#pragma once
#include <cstdint>
#include <string>

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

// ---- the CUDA path (kernels/attn_fp8_gpu.cpp) ----
// "" when a call of q (B,Nq,H,D), k (B,Nk,Hkv,D) and this mask is in the CUDA kernel's scope (above), else what puts it
// outside (for the refusal). Shapes and dtypes are checked by the kernel's own entry points.
std::string attn_fp8_cuda_out_of_scope(const Tensor& q, const Tensor& k, const AttnMask& mask);
// Bytes of the CUDA path's workspace for one call of B samples of N tokens, H query and Hkv K/V heads of dim D: the
// E4M3 codes and f32 factors of attn_bwd_fp8_quantize, each part 256-byte aligned, in this order:
//   qt (B,H,D,N) e4m3 | q_factor (B,H,N/128) f32 | dot (B,H,D,N) e4m3 | do_factor (B,H,N/128) f32 |
//   kt (B,Hkv,D,N) e4m3 | k_factor (B,Hkv,N/128) f32
// (about (2H + Hkv) x B x N x D bytes; 16K tokens, 8 heads, D 128: 48 MiB). Reused by every call in stream order.
// A ring block's Nq and Nk are both the rank's N rows, so one size serves every block of the ring.
int64_t attn_fp8_bwd_workspace_bytes(int64_t B, int64_t N, int64_t H, int64_t Hkv, int64_t D);
// The workspace the CUDA calls of this thread use while the scope lives (scopes nest; nullptr: none, and a CUDA call
// is refused). `workspace` (attn_fp8_bwd_workspace_bytes bytes or more, any dtype, on the calls' device) is owned by
// the caller and must outlive the scope; the calls write it on the current stream, so one workspace serves calls
// queued in order on one stream.
class AttnFp8BwdWorkspaceScope {
 public:
  explicit AttnFp8BwdWorkspaceScope(const Tensor* workspace);
  ~AttnFp8BwdWorkspaceScope();
  AttnFp8BwdWorkspaceScope(const AttnFp8BwdWorkspaceScope&) = delete;
  AttnFp8BwdWorkspaceScope& operator=(const AttnFp8BwdWorkspaceScope&) = delete;

 private:
  const Tensor* previous_;
};

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
