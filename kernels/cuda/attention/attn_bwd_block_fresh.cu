// attn_bwd_block_fresh on CUDA: attn_bwd_block into dK / dV outputs that it overwrites. Where bwd v5 runs and the
// key range is every row (so every row gets written) it is one launch of the v5 kernel with overwrite_dkv: the
// epilogue stores dK / dV with TMA instead of adding, and key tiles no query sees store zeros; elsewhere it
// zeroes dk / dv and runs attn_bwd_block. attn_bwd_block_fresh_two_kv: the same over two key sources as one list
// (one v5 launch: K / V and dK / dV of each tile through its source's tensor maps), else one call per source.
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_dispatch.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"

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

void attn_bwd_block_fresh_two_kv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                                 const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                                 Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask) {
  const char* op = "attn_bwd_block_fresh_two_kv";
  cudaStream_t stream = stream_for(q, op);
  int64_t list_rows = 0;
  const AttnDims d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, op);
  attn_dims(q, k, v, op);  // dtypes and devices
  require_attn_tensor(k2, DType::bf16, q.device, op, "k2");
  require_attn_tensor(v2, DType::bf16, q.device, op, "v2");
  check_attn_bwd_args(d, q, dout, lse, delta, dq_acc, dk, dv, op);
  AttnDims d2 = d;  // the second source
  d2.Nk = k2.shape[1];
  require_attn_tensor(dk2, DType::f32, q.device, op, "dk2");
  require_attn_tensor(dv2, DType::f32, q.device, op, "dv2");
  check_shape(dk2, {d.B, d2.Nk, d.Hkv, d.D}, op, "dk2 (B,Nk2,Hkv,D)");
  check_shape(dv2, {d.B, d2.Nk, d.Hkv, d.D}, op, "dv2 (B,Nk2,Hkv,D)");
  const int64_t k2_row = attn_second_kv_row(d.Nk);
  AttnDims dl = d;  // the key list
  dl.Nk = list_rows;
  const AttnRanges r = attn_ranges(mask, d.Nq, list_rows, op);
  const int device = q.device.index;
  const bool fused = d.B > 0 && d.H > 0 && d.Nq > 0 && d.Nk >= kWgBwdKeys && d2.Nk >= kWgBwdKeys &&
                     attn_bwd_v5_fits(r.q_end, r.k_end) && attn_bwd_variant(d.D, device) == 5 &&
                     attn_bwd_v5_takes_docs(true, rt::deterministic_attention());
  if (!fused) {
    AttnMask second = mask;  // source 2's keys: the list's rows from k2_row
    second.docs.k_pos = mask.docs.k_pos + k2_row;
    cuda::attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
    cuda::attn_bwd_block_fresh(q, k2, v2, dout, lse, delta, dq_acc, dk2, dv2, second);
    return;
  }
  // Summaries over the list's rows; the kernel reads source 1 through Nk rows and source 2 from k2_row.
  AttnBwdParams p = attn_bwd_params(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask, dl, r, stream);
  p.Nk = d.Nk;
  p.k2_row = k2_row;
  p.k2 = k2.ptr<__nv_bfloat16>();
  p.v2 = v2.ptr<__nv_bfloat16>();
  p.dk2 = dk2.ptr<float>();
  p.dv2 = dv2.ptr<float>();
  p.overwrite_dkv = true;
  launch_attn_bwd(p, d, 5, device, stream);
}

}  // namespace cuda
}  // namespace rt
