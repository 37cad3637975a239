// The forward's variant choice and attn_fwd_block on CUDA: checks the arguments, sets up the kernel parameters and
// launches the variant chosen for this device and block (attn_fwd_fused.cu shares the choice and the set-up).
//   compute capability 9.0 with an sm_90a image, D = 64 or 128: fwd v5 (attn_fwd_sm90ws.cu), which runs fwd v4
//     (attn_fwd_sm90.cu) for blocks under 128 query or key rows;
//   elsewhere: the mma.sync kernels (attn_fwd_sm80.cu), v3 for D = 128 with at least 16K query rows, else v2.
// The measurements behind the defaults are in bench/NOTES.md ("fwd v5", "Kernel versions"). The override
// (RT_ATTN_FWD_VARIANT, set_attn_variant_override: kernels/cuda/attention/attn_variant.h) forces one: 2 or 3 always, 4 or 5
// where the device can run it, else the mma.sync default.
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_fwd_dispatch.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_variant.h"

namespace rt {
namespace cuda {

int attn_fwd_variant(int64_t D, int64_t q_rows, int device) {
  const int forced = attn_variant_override().fwd;
  if ((forced == 0 || forced == 5) && attn_fwd_ws_supported(device, D)) return 5;
  if (forced == 4 && attn_fwd_wgmma_supported(device, D)) return 4;
  if (forced == 2 || forced == 3) return forced;
  return (D == 128 && q_rows >= 16384) ? 3 : 2;
}

void check_attn_fwd_state(const AttnDims& d, const Tensor& q, const AttnState& state, const char* op) {
  require_attn_tensor(state.acc, DType::f32, q.device, op, "state.acc");
  require_dtype_on(state.m, DType::f32, q.device, op, "state.m");
  require_dtype_on(state.l, DType::f32, q.device, op, "state.l");
  check_attn_state_shapes(d, state, op);
}

AttnFwdParams attn_fwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const AttnState& state,
                              const AttnMask& mask, const AttnDims& d, const AttnRanges& r) {
  AttnFwdParams p;
  p.q = q.ptr<__nv_bfloat16>();
  p.k = k.ptr<__nv_bfloat16>();
  p.v = v.ptr<__nv_bfloat16>();
  p.acc = state.acc.ptr<float>();
  p.m = state.m.ptr<float>();
  p.l = state.l.ptr<float>();
  p.Nq = d.Nq; p.Nk = d.Nk; p.H = d.H; p.Hkv = d.Hkv; p.group = d.group;
  p.q_begin = r.q_begin; p.q_end = r.q_end; p.k_begin = r.k_begin; p.k_end = r.k_end;
  p.diag = mask.docs.on() ? 0 : mask.q_offset - mask.k_offset;
  p.causal = mask.causal && !mask.docs.on();  // the document mask replaces causal
  p.docs = attn_doc_mask_setup(mask.docs, d.B, d.Nq, d.Nk, r, q.device.index, stream_for(q, "attn_fwd"),
                               "attn_fwd");
  p.scale2 = float(1.0 / std::sqrt(double(d.D))) * kLog2e;
  p.num_q_tiles = 0;  // set by the launcher for its tile size
  return p;
}

void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask) {
  const char* op = "attn_fwd_block";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  check_attn_fwd_state(d, q, state, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.B == 0 || d.H == 0) return;

  const AttnFwdParams p = attn_fwd_params(q, k, v, state, mask, d, r);
  const int device = q.device.index;
  const int variant = attn_fwd_variant(d.D, r.q_end - r.q_begin, device);
  if (variant == 5) launch_attn_fwd_ws(p, d.D, d.B, device, stream);
  else if (variant == 4) launch_attn_fwd_wgmma(p, d.D, d.B, device, stream);
  else launch_attn_fwd_mma(variant, p, d.D, d.B, device, stream);
}

}  // namespace cuda
}  // namespace rt
