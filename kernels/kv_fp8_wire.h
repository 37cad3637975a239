// K and V rounded to E4M3 for the context-parallel ring (fp8.attention_kv: e4m3; issue 47 "Communication"): the
// quantizer every rank runs on its own K and V once per layer and call, and the dequantizer that turns the codes into
// the block the attention kernels read (parallel/cp/kv_fp8_message.h packs them into one ring message).
//
// Scale groups: per sample b, 128-row block [128 r, 128 r + 128) of the n rows as passed (the last one partial when
// 128 does not divide n) and K/V head hk, all D columns: the groups of kernels/attn_fp8.h's K row blocks. Each group
// follows kernels/fp8.h's rule: amax a = max |x| (fp8_amax_join: NaN once any element is NaN), s =
// fp8_scale_from_amax(a) = 448 / a, code = float_to_e4m3(x * s), factor = fp8_factor_from_scale(s) = 1 / s; the
// dequantized value is e4m3_value(code) * factor (in f32, then rounded to the output's dtype: exact on an f32 CPU
// rank, one bf16 rounding on a GPU). CPU tensors run the host code of kernels/kv_fp8_wire.cpp; CUDA tensors the
// kernels of kernels/cuda/kv_fp8_wire.cu, which give the same codes and factors bit for bit.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

constexpr int64_t kKvFp8RowBlock = 128;  // rows of a scale group

// ceil(n / 128): the row blocks of n rows.
inline int64_t kv_fp8_row_blocks(int64_t n) { return (n + kKvFp8RowBlock - 1) / kKvFp8RowBlock; }

// x (B, n, Hkv, D) f32 or bf16 -> codes (B, n, Hkv, D) e4m3 and factors (B, Hkv, ceil(n/128)) f32, both overwritten.
// All three on one device.
void kv_fp8_quantize(Tensor codes, Tensor factors, const Tensor& x);
// codes (B, n, Hkv, D) e4m3 and factors (B, Hkv, ceil(n/128)) f32 -> out (B, n, Hkv, D) f32 or bf16, overwritten:
// e4m3_value(code) * factor of the code's group.
void kv_fp8_dequantize(Tensor out, const Tensor& codes, const Tensor& factors);

}  // namespace rt
