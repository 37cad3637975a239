// attn_bwd_block_fresh on the host: zero dk / dv, then attn_bwd_block (no fused form here); attn_bwd_block_fresh_two_kv
// = attn_bwd_block_fresh over each source.
#include "kernels/attention.h"
#include "kernels/attention_shapes.h"

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

void attn_bwd_block_fresh_two_kv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                                 const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                                 Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask) {
  int64_t list_rows = 0;
  const AttnDims d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, "attn_bwd_block_fresh_two_kv");
  AttnMask second = mask;  // source 2's keys: the list's rows from attn_second_kv_row(Nk)
  second.docs.k_pos = mask.docs.k_pos + attn_second_kv_row(d.Nk);
  cpu::attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
  cpu::attn_bwd_block_fresh(q, k2, v2, dout, lse, delta, dq_acc, dk2, dv2, second);
}

}  // namespace cpu
}  // namespace rt
