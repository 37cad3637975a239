// The backward's variant choice and attn_bwd_block on CUDA: checks the arguments, sets up the kernel parameters
// (and the deterministic turn counters) and launches the variant chosen for this device and block
// (attn_bwd_block_fresh.cu shares all of it).
//   compute capability 9.0 with an sm_90a image, D = 64 or 128: bwd v5 (attn_bwd_sm90ws.cu), which runs bwd v4
//     (attn_bwd_sm90.cu) for blocks under 64 query or 128 key rows;
//   elsewhere: the mma.sync kernel bwd v1 (attn_bwd_sm80.cu).
// The measurements behind the default are in bench/NOTES.md ("bwd v5 with TMA", "bwd v5 persistent"). The override
// (RT_ATTN_BWD_VARIANT, set_attn_variant_override: kernels/cuda/attention/attn_variant.h) forces one: 1 always, 4 or 5
// where the device can run it, else v1.
// With a document mask (AttnMask::docs) v5 runs its document instantiation (attn_bwd_sm90ws_docs.cuh), except in
// deterministic mode: its turn counters need every key tile to visit every query tile in order, while v5 narrows
// each key tile to the query tiles that see it, so documents + deterministic run v4 (attn_bwd_v5_takes_docs).
// Every kernel's query tile is kWgBwdRows (64) rows: the deterministic turn counters (one per query tile) mean the
// same in all of them.
#include <mutex>

#include "kernels/attention.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_dispatch.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_variant.h"

namespace rt {
namespace cuda {
namespace {

// The turn counters of deterministic mode, per device, grown on demand and kept for the process.
int* dq_turn_buffer(int device, size_t count, cudaStream_t stream) {
  static std::mutex mutex;
  static int* buffers[kMaxDevices] = {};
  static size_t capacity[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  const int slot = device_slot(device);
  if (capacity[slot] < count) {
    if (buffers[slot]) CUDA_CHECK(cudaFree(buffers[slot]));
    CUDA_CHECK(cudaMalloc(&buffers[slot], count * sizeof(int)));
    capacity[slot] = count;
  }
  CUDA_CHECK(cudaMemsetAsync(buffers[slot], 0, count * sizeof(int), stream));
  return buffers[slot];
}

}  // namespace

void check_attn_bwd_args(const AttnDims& d, const Tensor& q, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, const Tensor& dq_acc, const Tensor& dk_acc, const Tensor& dv_acc,
                         const char* op) {
  const Device& dev = q.device;
  require_attn_tensor(dout, DType::bf16, dev, op, "dout");
  require_attn_tensor(lse, DType::f32, dev, op, "lse");
  require_attn_tensor(delta, DType::f32, dev, op, "delta");
  require_attn_tensor(dq_acc, DType::f32, dev, op, "dq_acc");
  require_attn_tensor(dk_acc, DType::f32, dev, op, "dk_acc");
  require_attn_tensor(dv_acc, DType::f32, dev, op, "dv_acc");
  check_attn_bwd_shapes(d, dout, lse, delta, dq_acc, dk_acc, dv_acc, op);
}

void set_attn_bwd_pointers(AttnBwdParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                           const Tensor& lse, const Tensor& delta, const Tensor& dq_acc, const Tensor& dk_acc,
                           const Tensor& dv_acc) {
  p.q = q.ptr<__nv_bfloat16>();
  p.k = k.ptr<__nv_bfloat16>();
  p.v = v.ptr<__nv_bfloat16>();
  p.dout = dout.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  p.delta = delta.ptr<float>();
  p.dq = dq_acc.ptr<float>();
  p.dk = dk_acc.ptr<float>();
  p.dv = dv_acc.ptr<float>();
}

AttnBwdParams attn_bwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc,
                              const AttnMask& mask, const AttnDims& d, const AttnRanges& r, cudaStream_t stream) {
  AttnBwdParams p;
  set_attn_bwd_pointers(p, q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc);
  p.dq_turn = rt::deterministic_attention()
                  ? dq_turn_buffer(q.device.index,
                                   size_t(d.B * d.H * ((r.q_end - r.q_begin + kWgBwdRows - 1) / kWgBwdRows)), stream)
                  : nullptr;
  p.Nq = d.Nq; p.Nk = d.Nk; p.H = d.H; p.Hkv = d.Hkv; p.group = d.group;
  p.q_begin = r.q_begin; p.q_end = r.q_end; p.k_begin = r.k_begin; p.k_end = r.k_end;
  p.diag = mask.docs.on() ? 0 : mask.q_offset - mask.k_offset;
  p.causal = mask.causal && !mask.docs.on();  // the document mask replaces causal
  p.docs = attn_doc_mask_setup(mask.docs, d.B, d.Nq, d.Nk, r, q.device.index, stream, "attn_bwd");
  p.scale = float(1.0 / std::sqrt(double(d.D)));
  p.scale2 = p.scale * kLog2e;
  return p;
}

int attn_bwd_variant(int64_t D, int device) {
  const int forced = attn_variant_override().bwd;
  if ((forced == 0 || forced == 4 || forced == 5) && (D == 128 || D == 64) && attn_bwd_wgmma_supported(device, D))
    return forced == 4 ? 4 : 5;
  return 1;
}

void launch_attn_bwd(const AttnBwdParams& p, const AttnDims& d, int variant, int device, cudaStream_t stream) {
  if (variant == 5 && attn_bwd_v5_fits(p.q_end, p.k_end) && attn_bwd_v5_takes_docs(p.docs.on, p.dq_turn != nullptr)) {
    launch_attn_bwd_ws(p, d.D, d.B, device, stream);
    return;
  }
  if (variant == 5 || variant == 4) {  // v4: the same contract, for any block size
    RT_CHECK(!p.overwrite_dkv, "attn_bwd_block (wgmma): only v5 overwrites dK / dV (q_end = "
                                   << p.q_end << ", k_end = " << p.k_end << ", variant " << variant << ")");
    launch_attn_bwd_wgmma(p, d.D, d.B, device, stream);
    return;
  }
  launch_attn_bwd_mma(p, d.D, d.B, device, stream);
}

void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask) {
  const char* op = "attn_bwd_block";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  check_attn_bwd_args(d, q, dout, lse, delta, dq_acc, dk_acc, dv_acc, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.B == 0 || d.H == 0) return;
  const AttnBwdParams p = attn_bwd_params(q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc, mask, d, r, stream);
  launch_attn_bwd(p, d, attn_bwd_variant(d.D, q.device.index), q.device.index, stream);
}

}  // namespace cuda
}  // namespace rt
