// The FP8 attention backward's host quantizers and its dispatch (kernels/attn_fp8.h): the CPU runs
// kernels/cpu/attention/attn_bwd_fp8.cpp, CUDA tensors kernels/attn_fp8_gpu.cpp (the sm_90a kernel where the call is in
// its scope; the two_kv form has no CUDA path and is refused).
#include "kernels/attn_fp8.h"

#include <algorithm>
#include <array>

namespace rt {

namespace cpu {
void attn_bwd_block_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                        const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask);
void attn_bwd_block_fresh_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                              const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask);
void attn_bwd_block_fresh_two_kv_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                     const Tensor& v2, const Tensor& dout, const Tensor& lse, const Tensor& delta,
                                     Tensor dq_acc, Tensor dk, Tensor dv, Tensor dk2, Tensor dv2,
                                     const AttnMask& mask);
}  // namespace cpu

namespace attn_fp8_cuda {  // kernels/attn_fp8_gpu.cpp
void block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
           const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask, const char* op);
void fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
           const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask, const char* op);
}  // namespace attn_fp8_cuda

bool attn_fp8_head_dim_supported(int64_t D) { return D == 64 || D == 128; }

float e4m3_value(uint8_t code) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = e4m3_to_float(uint8_t(c));
    return t;
  }();
  return table[code];
}

float attn_fp8_tile_amax(const float* x, int64_t rows, int64_t cols, int64_t ld) {
  float amax = 0.f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) amax = fp8_amax_join(amax, x[r * ld + c]);
  return amax;
}

void attn_fp8_quantize_tile(float* x, int64_t rows, int64_t cols, int64_t ld, float s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;  // (cols)
    for (int64_t c = 0; c < cols; ++c) row[c] = e4m3_value(float_to_e4m3(row[c] * s));
  }
}

void attn_fp8_quantize_row_blocks(const float* x, int64_t rows, int64_t row_stride, int64_t D, float* values,
                                  float* factors) {
  for (int64_t r0 = 0; r0 < rows; r0 += kAttnFp8RowBlock) {
    const int64_t n = std::min(kAttnFp8RowBlock, rows - r0);
    float amax = 0.f;
    for (int64_t r = r0; r < r0 + n; ++r)
      for (int64_t c = 0; c < D; ++c) amax = fp8_amax_join(amax, x[r * row_stride + c]);
    const float s = fp8_scale_from_amax(amax);
    factors[r0 / kAttnFp8RowBlock] = fp8_factor_from_scale(s);
    for (int64_t r = r0; r < r0 + n; ++r)
      for (int64_t c = 0; c < D; ++c) values[r * D + c] = e4m3_value(float_to_e4m3(x[r * row_stride + c] * s));
  }
}

void attn_bwd_block_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                        const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask) {
  if (q.device.is_cuda())
    return attn_fp8_cuda::block(q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc, mask, "attn_bwd_block_fp8");
  cpu::attn_bwd_block_fp8(q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc, mask);
}

void attn_bwd_block_fresh_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                              const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask) {
  if (q.device.is_cuda())
    return attn_fp8_cuda::fresh(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask, "attn_bwd_block_fresh_fp8");
  cpu::attn_bwd_block_fresh_fp8(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
}

void attn_bwd_block_fresh_two_kv_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                     const Tensor& v2, const Tensor& dout, const Tensor& lse, const Tensor& delta,
                                     Tensor dq_acc, Tensor dk, Tensor dv, Tensor dk2, Tensor dv2,
                                     const AttnMask& mask) {
  RT_CHECK(!q.device.is_cuda(),
           "attn_bwd_block_fresh_two_kv_fp8: no CUDA path (the sm_90a FP8 backward takes no documents; the "
           "two-source call is the gather scheme's, parallel.cp > 1 with packed documents); train without packed "
           "documents, or set fp8.attention: false");
  cpu::attn_bwd_block_fresh_two_kv_fp8(q, k, v, k2, v2, dout, lse, delta, dq_acc, dk, dv, dk2, dv2, mask);
}

}  // namespace rt
