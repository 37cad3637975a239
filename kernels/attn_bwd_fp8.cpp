// The FP8 attention backward experiment's entry points (kernels/attn_bwd_fp8.h): the shape, dtype and device checks,
// then the CUDA launchers (kernels/cuda/attention/attn_bwd_fp8_launch.h). CUDA only: CPU tensors and builds without
// CUDA are refused with the reason (the CPU backend's FP8 backward is attn_bwd_block_fp8, kernels/attn_fp8.h).
#include "kernels/attn_bwd_fp8.h"

#include <cstdint>
#include <string>

#include "kernels/attn_fp8_common.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#endif

namespace rt {

namespace {

const AttnFp8OpText kText{"the FP8 attention backward kernel", " (the CPU backend runs attn_bwd_block_fp8)",
                          "; on CPU ranks use attn_bwd_block_fp8",
                          " (use attn_bwd_block, the bf16 backward, for other head dims)"};

// q, dout (B,N,H,D), k (and v) (B,N,Hkv,D), bf16 on one CUDA device; N % 128 == 0, D == 128.
AttnDims fp8_bwd_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const char* op) {
  return attn_fp8_input_dims(q, k, v, &dout, kAttnFp8BwdBlock, op, kText);
}

void check_codes(const AttnFp8BwdCodes& c, const AttnDims& d, const Device& dev, const char* op) {
  const int64_t nblk = d.Nq / kAttnFp8BwdBlock;
  attn_fp8_check_operand(c.qt, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.qt (B,H,D,N)");
  attn_fp8_check_operand(c.q_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.q_factor (B,H,N/128)");
  attn_fp8_check_operand(c.dot, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.dot (B,H,D,N)");
  attn_fp8_check_operand(c.do_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.do_factor (B,H,N/128)");
  attn_fp8_check_operand(c.kt, DType::e4m3, {d.B, d.Hkv, d.D, d.Nq}, dev, op, "codes.kt (B,Hkv,D,N)");
  attn_fp8_check_operand(c.k_factor, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.k_factor (B,Hkv,N/128)");
}

#if RINGTRAIN_HAVE_CUDA
cuda::AttnFp8BwdDims launch_dims(const AttnDims& d) { return cuda::AttnFp8BwdDims{d.B, d.Nq, d.H, d.Hkv, d.D}; }
#endif

}  // namespace

void attn_bwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& dout, const AttnFp8BwdCodes& codes) {
  const char* op = "attn_bwd_fp8_quantize";
  const AttnDims d = fp8_bwd_dims(q, k, k, dout, op);
  check_codes(codes, d, q.device, op);
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_bwd_fp8_quantize(q, k, dout, codes, launch_dims(d));
#else
  attn_fp8_refuse_no_cuda(op, kText);
#endif
}

void attn_bwd_fp8_from_codes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, const AttnFp8BwdCodes& codes, bool causal, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_from_codes";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
  check_codes(codes, d, q.device, op);
  attn_fp8_check_operand(lse, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "lse (B,H,N)");
  attn_fp8_check_operand(delta, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "delta (B,H,N)");
  attn_fp8_check_operand(dq_acc, DType::f32, {d.B, d.Nq, d.H, d.D}, q.device, op, "dq_acc (B,N,H,D)");
  attn_fp8_check_operand(dk_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dk_acc (B,N,Hkv,D)");
  attn_fp8_check_operand(dv_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dv_acc (B,N,Hkv,D)");
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_bwd_fp8(q, k, v, dout, lse, delta, codes, launch_dims(d), causal, dq_acc, dk_acc, dv_acc);
#else
  (void)causal;
  attn_fp8_refuse_no_cuda(op, kText);
#endif
}

const char* attn_bwd_fp8_kernel_name() {
#if RINGTRAIN_HAVE_CUDA
  const int v = cuda::attn_bwd_fp8_kernel_version();
  return v == 1 ? "v1" : v == 3 ? "v3" : "v2";
#else
  return "none";
#endif
}

void attn_bwd_fp8_select_kernel(const char* name) {
  const std::string n = name == nullptr ? std::string() : std::string(name);
  const int v = n.empty() ? 0 : n == "v1" ? 1 : n == "v2" ? 2 : n == "v3" ? 3 : -1;
  RT_CHECK(v >= 0, "attn_bwd_fp8_select_kernel(\"" << n << "\"): expected v1, v2, v3 or nullptr");
#if RINGTRAIN_HAVE_CUDA
  cuda::set_attn_bwd_fp8_kernel_version(v);
#else
  RT_CHECK(v == 0, "attn_bwd_fp8_select_kernel: this build has no CUDA kernels");
#endif
}

void attn_bwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, bool causal, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_experiment";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
  const int64_t nblk = d.Nq / kAttnFp8BwdBlock;
  const Device dev = q.device;
  // One allocation for the codes and factors (attn_fp8_with_scratch), in the order of AttnFp8BwdCodes' fields.
  const auto run = [&](char* const* part) {
    AttnFp8BwdCodes c;
    c.qt = Tensor(part[0], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
    c.q_factor = Tensor(part[1], DType::f32, dev, {d.B, d.H, nblk});
    c.dot = Tensor(part[2], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
    c.do_factor = Tensor(part[3], DType::f32, dev, {d.B, d.H, nblk});
    c.kt = Tensor(part[4], DType::e4m3, dev, {d.B, d.Hkv, d.D, d.Nq});
    c.k_factor = Tensor(part[5], DType::f32, dev, {d.B, d.Hkv, nblk});
    attn_bwd_fp8_quantize(q, k, dout, c);
    attn_bwd_fp8_from_codes(q, k, v, dout, lse, delta, c, causal, dq_acc, dk_acc, dv_acc);
  };
  attn_fp8_with_scratch(q,
                        {d.B * d.H * d.D * d.Nq, d.B * d.H * nblk * 4, d.B * d.H * d.D * d.Nq, d.B * d.H * nblk * 4,
                         d.B * d.Hkv * d.D * d.Nq, d.B * d.Hkv * nblk * 4},
                        op, "attn_bwd_fp8_experiment frees its scratch", kText, run);
}

}  // namespace rt
