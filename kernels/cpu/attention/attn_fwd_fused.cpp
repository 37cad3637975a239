// The forward's fused forms on the host: the op sequences they stand for (no fused kernel here).
//   attn_fwd_whole = attn_state_reset + attn_fwd_block + attn_fwd_finalize;
//   attn_fwd_block_first = attn_state_reset + attn_fwd_block; attn_fwd_block_last = attn_fwd_block +
//   attn_fwd_finalize.
#include "kernels/attention.h"

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

}  // namespace cpu
}  // namespace rt
