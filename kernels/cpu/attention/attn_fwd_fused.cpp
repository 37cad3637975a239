// The forward's fused forms on the host: the op sequences they stand for (no fused kernel here).
//   attn_fwd_whole = attn_state_reset + attn_fwd_block + attn_fwd_finalize;
//   attn_fwd_block_first = attn_state_reset + attn_fwd_block; attn_fwd_block_last = attn_fwd_block +
//   attn_fwd_finalize; attn_fwd_whole_two_kv = attn_fwd_block_first over k / v + attn_fwd_block_last over k2 / v2.
#include "kernels/attention.h"
#include "kernels/attention_shapes.h"

namespace rt {
namespace cpu {

void attn_state_reset(AttnState& state);
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask);
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);

void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse) {
  cpu::attn_state_reset(scratch);  // qualified: rt::attn_state_reset is found by ADL too
  cpu::attn_fwd_block(q, k, v, scratch, mask);
  cpu::attn_fwd_finalize(scratch, out, lse);
}

void attn_fwd_block_first(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                          const AttnMask& mask) {
  cpu::attn_state_reset(state);
  cpu::attn_fwd_block(q, k, v, state, mask);
}

void attn_fwd_block_last(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                         const AttnMask& mask, Tensor out, Tensor lse) {
  cpu::attn_fwd_block(q, k, v, state, mask);
  cpu::attn_fwd_finalize(state, out, lse);
}

void attn_fwd_whole_two_kv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                           AttnState& scratch, const AttnMask& mask, Tensor out, Tensor lse) {
  int64_t list_rows = 0;
  const AttnDims d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, "attn_fwd_whole_two_kv");
  AttnMask second = mask;  // source 2's keys: the list's rows from attn_second_kv_row(Nk)
  second.docs.k_pos = mask.docs.k_pos + attn_second_kv_row(d.Nk);
  cpu::attn_fwd_block_first(q, k, v, scratch, mask);
  cpu::attn_fwd_block_last(q, k2, v2, scratch, second, out, lse);
}

}  // namespace cpu
}  // namespace rt
