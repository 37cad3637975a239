// attn_fwd_whole on CUDA: the forward of one K/V block from a fresh state, finalized. Where fwd v5 runs (and
// the output is bf16, the query range is every row, both ranges hold at least one 128-row TMA box) it is one
// launch of the fwd v5 kernel with `fresh` (no state read) and `out` / `lse` set (finalized by the kernel, no
// state written); elsewhere attn_state_reset + attn_fwd_block + attn_fwd_finalize.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attn_fwd_dispatch.cuh"
#include "kernels/cuda/attn_fwd_ws.cuh"

namespace rt {
namespace cuda {

void attn_state_reset(AttnState& state);                                 // attn_state_reset.cu
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);  // attn_fwd_finalize.cu
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                    const AttnMask& mask);  // attn_fwd_dispatch.cu

void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse) {
  const char* op = "attn_fwd_whole";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  const bool fused = d.B > 0 && d.H > 0 && r.k_begin < r.k_end && r.q_begin == 0 && r.q_end == d.Nq &&
                     r.q_end >= 128 && r.k_end >= 128 && out.dtype == DType::bf16 &&
                     attn_fwd_variant(d.D, r.q_end - r.q_begin, q.device.index) == 5;
  if (!fused) {
    cuda::attn_state_reset(scratch);  // qualified: rt::attn_state_reset (ops.h) is found by ADL too
    cuda::attn_fwd_block(q, k, v, scratch, mask);
    cuda::attn_fwd_finalize(scratch, out, lse);
    return;
  }
  require_attn_tensor(out, DType::bf16, q.device, op, "out");
  require_dtype_on(lse, DType::f32, q.device, op, "lse");
  check_shape(out, {d.B, d.Nq, d.H, d.D}, op, "out (B,Nq,H,D)");
  check_shape(lse, {d.B, d.H, d.Nq}, op, "lse (B,H,Nq)");
  AttnFwdParams p = attn_fwd_params(q, k, v, scratch, mask, d, r);
  p.acc = p.m = p.l = nullptr;  // the fused kernel reads and writes no state
  p.fresh = true;
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  launch_attn_fwd_ws(p, d.D, d.B, q.device.index, stream);
}

}  // namespace cuda
}  // namespace rt
