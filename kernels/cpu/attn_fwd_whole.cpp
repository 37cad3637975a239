// attn_fwd_whole on the host: attn_state_reset + attn_fwd_block + attn_fwd_finalize (no fused form here).
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

}  // namespace cpu
}  // namespace rt
