// A backward call's inputs on the GPU, allocated from the call's sizes and filled from host f32 values; shared by the
// FP8 backward tests (tests/gpu/test_cuda_attn_bwd_fp8_blocks.cpp, tests/gpu/test_cuda_attn_fp8_model_op.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

struct AttnBwdDeviceInputs {
  Buffer q, k, v, dout;  // (B, Nq, H, D), (B, Nk, Hkv, D), (B, Nk, Hkv, D), (B, Nq, H, D) bf16
  Buffer lse, delta;     // (B, H, Nq) f32
  AttnBwdDeviceInputs(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D)
      : q(gpu(), DType::bf16, {B, Nq, H, D}),
        k(gpu(), DType::bf16, {B, Nk, Hkv, D}),
        v(gpu(), DType::bf16, {B, Nk, Hkv, D}),
        dout(gpu(), DType::bf16, {B, Nq, H, D}),
        lse(gpu(), DType::f32, {B, H, Nq}),
        delta(gpu(), DType::f32, {B, H, Nq}) {}
  // Host values of the shapes above (rounded to bf16 where the buffer is bf16).
  void fill(const std::vector<float>& hq, const std::vector<float>& hk, const std::vector<float>& hv,
            const std::vector<float>& hdout, const std::vector<float>& hlse, const std::vector<float>& hdelta) const {
    upload(q, hq);
    upload(k, hk);
    upload(v, hv);
    upload(dout, hdout);
    upload(lse, hlse);
    upload(delta, hdelta);
  }
};

}  // namespace rt::test
