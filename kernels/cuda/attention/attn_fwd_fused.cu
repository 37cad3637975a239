// The forward's fused forms on CUDA (kernels/op_list.inc has their contracts):
//   attn_fwd_whole       = attn_state_reset + attn_fwd_block + attn_fwd_finalize (one K/V block, cp = 1);
//   attn_fwd_block_first = attn_state_reset + attn_fwd_block (a ring rank's first step);
//   attn_fwd_block_last  = attn_fwd_block + attn_fwd_finalize (a ring rank's last step);
//   attn_fwd_whole_two_kv = attn_fwd_block_first over k / v + attn_fwd_block_last over k2 / v2 (the gather
//                          scheme's own and gathered keys; the kernel reads the two sources as one key list).
// Where fwd v5 runs (and the output is bf16, both ranges hold at least one TMA box) each is one launch of
// the fwd v5 kernel: `fresh` (no state read) and / or `out` / `lse` set (finalized by the kernel, no state
// written). The rows outside the mask's query range get extra CTAs that write what the sequence would leave there
// (a reset state, or the finalized state). Elsewhere the ops run the sequence.
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_fwd_dispatch.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"

namespace rt {
namespace cuda {

void attn_state_reset(AttnState& state);                                 // attn_state_reset.cu
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);  // attn_fwd_finalize.cu
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                    const AttnMask& mask);  // attn_fwd_dispatch.cu

namespace {

// Whether one fwd v5 launch does the fused form of this call (out: the finalized output, or null).
bool fused_form_runs(const Tensor& q, const AttnDims& d, const AttnRanges& r, const Tensor* out) {
  return d.B > 0 && d.H > 0 && r.k_begin < r.k_end && r.q_begin < r.q_end && r.q_end >= 128 && r.k_end >= 128 &&
         (out == nullptr || out->dtype == DType::bf16) &&
         attn_fwd_variant(d.D, r.q_end - r.q_begin, q.device.index) == 5;
}

void check_finalized_outputs(const AttnDims& d, const Tensor& q, const Tensor& out, const Tensor& lse,
                             const char* op) {
  require_attn_tensor(out, DType::bf16, q.device, op, "out");
  require_dtype_on(lse, DType::f32, q.device, op, "lse");
  check_shape(out, {d.B, d.Nq, d.H, d.D}, op, "out (B,Nq,H,D)");
  check_shape(lse, {d.B, d.H, d.Nq}, op, "lse (B,H,Nq)");
}

}  // namespace

void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse) {
  const char* op = "attn_fwd_whole";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (!fused_form_runs(q, d, r, &out)) {
    cuda::attn_state_reset(scratch);  // qualified: rt::attn_state_reset (ops.h) is found by ADL too
    cuda::attn_fwd_block(q, k, v, scratch, mask);
    cuda::attn_fwd_finalize(scratch, out, lse);
    return;
  }
  check_finalized_outputs(d, q, out, lse, op);
  AttnFwdParams p = attn_fwd_params(q, k, v, scratch, mask, d, r);
  p.acc = p.m = p.l = nullptr;  // the fused kernel reads and writes no state
  p.fresh = true;
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  launch_attn_fwd_ws(p, d.D, d.B, q.device.index, stream);
}

void attn_fwd_block_first(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                          const AttnMask& mask) {
  const char* op = "attn_fwd_block_first";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (!fused_form_runs(q, d, r, nullptr)) {
    cuda::attn_state_reset(state);
    cuda::attn_fwd_block(q, k, v, state, mask);
    return;
  }
  check_attn_fwd_state(d, q, state, op);
  AttnFwdParams p = attn_fwd_params(q, k, v, state, mask, d, r);
  p.fresh = true;  // the state is written, not read
  launch_attn_fwd_ws(p, d.D, d.B, q.device.index, stream);
}

void attn_fwd_block_last(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state,
                         const AttnMask& mask, Tensor out, Tensor lse) {
  const char* op = "attn_fwd_block_last";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (!fused_form_runs(q, d, r, &out)) {
    cuda::attn_fwd_block(q, k, v, state, mask);
    cuda::attn_fwd_finalize(state, out, lse);
    return;
  }
  check_attn_fwd_state(d, q, state, op);
  check_finalized_outputs(d, q, out, lse, op);
  AttnFwdParams p = attn_fwd_params(q, k, v, state, mask, d, r);  // the state is read, not written
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  launch_attn_fwd_ws(p, d.D, d.B, q.device.index, stream);
}

void attn_fwd_whole_two_kv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                           AttnState& scratch, const AttnMask& mask, Tensor out, Tensor lse) {
  const char* op = "attn_fwd_whole_two_kv";
  cudaStream_t stream = stream_for(q, op);
  int64_t list_rows = 0;
  const AttnDims d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, op);
  const int64_t Nk2 = k2.shape[1], k2_row = attn_second_kv_row(d.Nk);
  AttnDims dl = d;  // the key list
  dl.Nk = list_rows;
  const AttnRanges r = attn_ranges(mask, d.Nq, list_rows, op);
  if (!fused_form_runs(q, dl, r, &out) || d.Nk < 128 || Nk2 < 128) {
    AttnMask second = mask;  // source 2's keys: the list's rows from k2_row
    second.docs.k_pos = mask.docs.k_pos + k2_row;
    cuda::attn_fwd_block_first(q, k, v, scratch, mask);
    cuda::attn_fwd_block_last(q, k2, v2, scratch, second, out, lse);
    return;
  }
  attn_dims(q, k, v, op);  // dtypes and devices
  require_attn_tensor(k2, DType::bf16, q.device, op, "k2");
  require_attn_tensor(v2, DType::bf16, q.device, op, "v2");
  check_finalized_outputs(d, q, out, lse, op);
  AttnFwdParams p = attn_fwd_params(q, k, v, scratch, mask, dl, r);  // summaries over the list's rows
  p.Nk = d.Nk;  // the first source's rows (its tensor map); k_end is the list's end
  p.k2_row = k2_row;
  p.k2 = k2.ptr<__nv_bfloat16>();
  p.v2 = v2.ptr<__nv_bfloat16>();
  p.acc = p.m = p.l = nullptr;
  p.fresh = true;
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  launch_attn_fwd_ws(p, d.D, d.B, q.device.index, stream);
}

}  // namespace cuda
}  // namespace rt
