// attn_bwd_block_fresh on CUDA: attn_bwd_block into dK / dV outputs that it overwrites. Where bwd v5 runs and the
// key range is every row (so every row gets written) it is one launch of the v5 kernel with overwrite_dkv: the
// epilogue stores dK / dV with TMA instead of adding, and key tiles no query sees store zeros; elsewhere it
// zeroes dk / dv and runs attn_bwd_block.
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_dispatch.cuh"
#include "kernels/cuda/attention/wgmma_attn_bwd.cuh"

namespace rt {
namespace cuda {

void fill(Tensor y, float value);  // fill.cu
void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc,
                    const AttnMask& mask);  // attn_bwd_dispatch.cu

void attn_bwd_block_fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                          const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask) {
  const char* op = "attn_bwd_block_fresh";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  check_attn_bwd_args(d, q, dout, lse, delta, dq_acc, dk, dv, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  const int device = q.device.index;
  const bool fused = d.B > 0 && d.H > 0 && r.q_begin < r.q_end && r.k_begin == 0 && r.k_end == d.Nk &&
                     attn_bwd_v5_fits(r.q_end, r.k_end) && attn_bwd_variant(d.D, device) == 5 &&
                     attn_bwd_v5_takes_docs(mask.docs.on(), rt::deterministic_attention());
  if (!fused) {
    cuda::fill(dk, 0.f);  // qualified: rt::fill (ops.h) is found by ADL too
    cuda::fill(dv, 0.f);
    cuda::attn_bwd_block(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
    return;
  }
  AttnBwdParams p = attn_bwd_params(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask, d, r, stream);
  p.overwrite_dkv = true;
  launch_attn_bwd(p, d, 5, device, stream);
}

}  // namespace cuda
}  // namespace rt
