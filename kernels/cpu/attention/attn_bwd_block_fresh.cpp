// attn_bwd_block_fresh on the host: zero dk / dv, then attn_bwd_block (no fused form here).
#include "kernels/attention.h"

namespace rt {
namespace cpu {

void fill(Tensor y, float value);
void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask);

void attn_bwd_block_fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                          const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask) {
  cpu::fill(dk, 0.f);  // qualified: rt::fill is found by ADL too
  cpu::fill(dv, 0.f);
  cpu::attn_bwd_block(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
}

}  // namespace cpu
}  // namespace rt
