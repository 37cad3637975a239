// The FP8 attention backward's CUDA path (kernels/attn_fp8.h "On CUDA tensors"): the scope test, the caller-owned
// workspace and its thread-local scope, and the block op on the sm_90a kernel of kernels/attn_bwd_fp8.h
// (attn_bwd_fp8_quantize into the workspace, then attn_bwd_fp8_from_codes). Only that kernel's public API is called.
#include <cstdint>
#include <sstream>

#include "kernels/attn_bwd_fp8.h"
#include "kernels/attn_fp8.h"
#include "kernels/ops.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/op_profile_scope.h"
#endif

namespace rt {

namespace {

thread_local const Tensor* t_workspace = nullptr;

int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Byte counts of the workspace's six parts, in AttnFp8BwdCodes' field order (qt, q_factor, dot, do_factor, kt,
// k_factor), for Nq query rows and Nk key rows.
void part_bytes(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, int64_t out[6]) {
  const int64_t qblk = Nq / kAttnFp8BwdBlock, kblk = Nk / kAttnFp8BwdBlock;
  out[0] = B * H * D * Nq;      // qt (B,H,D,Nq) e4m3
  out[1] = B * H * qblk * 4;    // q_factor (B,H,Nq/128) f32
  out[2] = B * H * D * Nq;      // dot (B,H,D,Nq) e4m3
  out[3] = B * H * qblk * 4;    // do_factor (B,H,Nq/128) f32
  out[4] = B * Hkv * D * Nk;    // kt (B,Hkv,D,Nk) e4m3
  out[5] = B * Hkv * kblk * 4;  // k_factor (B,Hkv,Nk/128) f32
}

int64_t workspace_bytes(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D) {
  int64_t bytes[6];
  part_bytes(B, Nq, Nk, H, Hkv, D, bytes);
  int64_t total = 0;
  for (int64_t b : bytes) total += round_up_256(b);
  return total;
}

// The codes of one call cut from the scope's workspace (refused when there is none, or it is too small).
AttnFp8BwdCodes codes_from_workspace(const Tensor& q, const Tensor& k, const char* op) {
  const int64_t B = q.size(0), Nq = q.size(1), H = q.size(2), D = q.size(3), Nk = k.size(1), Hkv = k.size(2);
  const int64_t need = workspace_bytes(B, Nq, Nk, H, Hkv, D);
  RT_CHECK(t_workspace != nullptr && t_workspace->defined(),
           op << ": CUDA tensors need the caller's workspace for the E4M3 codes (" << need
              << " bytes here); open an AttnFp8BwdWorkspaceScope around the call (RingAttention::set_fp8_backward "
                 "takes it from the arena)");
  const Tensor& w = *t_workspace;
  RT_CHECK(w.device == q.device, op << ": the workspace is on " << w.device.str() << ", q on " << q.device.str());
  RT_CHECK(int64_t(w.nbytes()) >= need, op << ": the workspace holds " << w.nbytes() << " bytes, this call needs "
                                           << need << " (B=" << B << ", Nq=" << Nq << ", Nk=" << Nk << ", H=" << H
                                           << ", Hkv=" << Hkv
                                           << ", D=" << D << "); size it with attn_fp8_bwd_workspace_bytes");
  int64_t bytes[6];
  part_bytes(B, Nq, Nk, H, Hkv, D, bytes);
  char* part[6];
  char* at = static_cast<char*>(w.data);
  for (int i = 0; i < 6; ++i) {
    part[i] = at;
    at += round_up_256(bytes[i]);
  }
  const int64_t qblk = Nq / kAttnFp8BwdBlock, kblk = Nk / kAttnFp8BwdBlock;
  const Device dev = q.device;
  AttnFp8BwdCodes c;
  c.qt = Tensor(part[0], DType::e4m3, dev, {B, H, D, Nq});
  c.q_factor = Tensor(part[1], DType::f32, dev, {B, H, qblk});
  c.dot = Tensor(part[2], DType::e4m3, dev, {B, H, D, Nq});
  c.do_factor = Tensor(part[3], DType::f32, dev, {B, H, qblk});
  c.kt = Tensor(part[4], DType::e4m3, dev, {B, Hkv, D, Nk});
  c.k_factor = Tensor(part[5], DType::f32, dev, {B, Hkv, kblk});
  return c;
}

}  // namespace

int64_t attn_fp8_bwd_workspace_bytes(int64_t B, int64_t N, int64_t H, int64_t Hkv, int64_t D) {
  return workspace_bytes(B, N, N, H, Hkv, D);
}

AttnFp8BwdWorkspaceScope::AttnFp8BwdWorkspaceScope(const Tensor* workspace) : previous_(t_workspace) {
  t_workspace = workspace;
}
AttnFp8BwdWorkspaceScope::~AttnFp8BwdWorkspaceScope() { t_workspace = previous_; }

std::string attn_fp8_cuda_out_of_scope(const Tensor& q, const Tensor& k, const AttnMask& mask) {
  const int64_t Nq = q.ndim == 4 ? q.size(1) : -1, Nk = k.ndim == 4 ? k.size(1) : -1, D = q.ndim == 4 ? q.size(3) : -1;
  std::string why;
  attn_bwd_fp8_cuda_supports(mask, Nq, Nk, D, &why);  // the kernel's own rule (kernels/attn_bwd_fp8.h)
  return why;
}

namespace attn_fp8_cuda {

void block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
           const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask, const char* op) {
  const std::string why = attn_fp8_cuda_out_of_scope(q, k, mask);
  RT_CHECK(why.empty(), op << ": fp8.attention on CUDA runs the sm_90a kernel for causal or full blocks without "
                              "documents (D = 128, rows a multiple of 128), but this call is outside it: "
                           << why << "; train without packed documents, with head_dim 128 (model.d_model / "
                              "model.n_head) and data.seq_len / parallel.cp a multiple of 128, or set "
                              "fp8.attention: false");
  const AttnFp8BwdCodes codes = codes_from_workspace(q, k, op);
  {
#ifdef RINGTRAIN_HAVE_CUDA
    const cuda::OpProfileScope timer("attn_bwd_fp8_quantize");  // in kernels/op_profile.h's per-op profile
#endif
    attn_bwd_fp8_quantize(q, k, dout, codes);
  }
#ifdef RINGTRAIN_HAVE_CUDA
  const cuda::OpProfileScope timer("attn_bwd_fp8_from_codes");
#endif
  attn_bwd_fp8_from_codes(q, k, v, dout, lse, delta, codes, mask, dq_acc, dk_acc, dv_acc);
}

void fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
           const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask, const char* op) {
  // The scope test before the fills, so that a refused call leaves its outputs as they were.
  const std::string why = attn_fp8_cuda_out_of_scope(q, k, mask);
  if (why.empty()) {
    fill(dk, 0.f);
    fill(dv, 0.f);
  }
  block(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask, op);
}

}  // namespace attn_fp8_cuda

}  // namespace rt
