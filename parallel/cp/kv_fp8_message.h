// One K|V message of the ring in E4M3 (fp8.attention_kv: e4m3, RingAttention::set_kv_wire): the codes of K and V and
// their f32 factors (kernels/kv_fp8_wire.h: one per sample, 128-row block and K/V head) in one byte buffer, so that a
// hop is one exchange, as the activation-dtype K|V block is. Layout of a message of B samples, n rows, Hkv heads of
// dim D (nb = ceil(n / 128)):
//   [K codes (B, n, Hkv, D) e4m3 | V codes (B, n, Hkv, D) e4m3 | pad to 16 bytes | K factors (B, Hkv, nb) f32 |
//    V factors (B, Hkv, nb) f32]
// 2 B n Hkv D + 8 B Hkv nb bytes (plus at most 15 of padding): about half of the bf16 block's 4 B n Hkv D (a quarter
// of the f32 block's on CPU ranks).
#pragma once
#include <cstdint>

#include "kernels/kv_fp8_wire.h"
#include "kernels/tensor.h"

namespace rt {

class KvFp8Message {
 public:
  KvFp8Message() = default;
  KvFp8Message(int64_t B, int64_t n, int64_t Hkv, int64_t D) : B_(B), n_(n), Hkv_(Hkv), D_(D) {}

  int64_t bytes() const { return factors_offset() + 2 * B_ * Hkv_ * kv_fp8_row_blocks(n_) * 4; }

  // K (which = 0) or V (1) codes (B, n, Hkv, D) e4m3 and factors (B, Hkv, nb) f32 of a message `msg` (bytes() e4m3
  // elements). A measuring arena's message (null data) gives null views.
  Tensor codes(const Tensor& msg, int which) const {
    return at(msg, which * code_bytes(), DType::e4m3, {B_, n_, Hkv_, D_});
  }
  Tensor factors(const Tensor& msg, int which) const {
    const int64_t nb = kv_fp8_row_blocks(n_);
    return at(msg, factors_offset() + which * B_ * Hkv_ * nb * 4, DType::f32, {B_, Hkv_, nb});
  }

  // Quantizes k and v (B, n, Hkv, D) into msg.
  void pack(const Tensor& msg, const Tensor& k, const Tensor& v) const {
    kv_fp8_quantize(codes(msg, 0), factors(msg, 0), k);
    kv_fp8_quantize(codes(msg, 1), factors(msg, 1), v);
  }
  // Dequantizes msg into kv (2, B, n, Hkv, D) packed K|V in the activation dtype.
  void unpack(const Tensor& kv, const Tensor& msg) const {
    for (int which = 0; which < 2; ++which)
      kv_fp8_dequantize(kv.slice(which, which + 1).view({B_, n_, Hkv_, D_}), codes(msg, which), factors(msg, which));
  }

 private:
  int64_t B_ = 0, n_ = 0, Hkv_ = 0, D_ = 0;

  int64_t code_bytes() const { return B_ * n_ * Hkv_ * D_; }
  int64_t factors_offset() const { return (2 * code_bytes() + 15) / 16 * 16; }
  static Tensor at(const Tensor& msg, int64_t offset, DType dtype, std::initializer_list<int64_t> dims) {
    void* p = msg.data ? static_cast<void*>(static_cast<char*>(msg.data) + offset) : nullptr;
    return Tensor(p, dtype, msg.device, dims);
  }
};

}  // namespace rt
