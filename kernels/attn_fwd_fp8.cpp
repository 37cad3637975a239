// The FP8 attention forward experiment's entry points (kernels/attn_fwd_fp8.h): the shape, dtype and device checks,
// then the CUDA launchers (kernels/cuda/attention/attn_fwd_fp8_launch.h). CUDA only: CPU tensors and builds
// without CUDA are refused with the reason.
#include "kernels/attn_fwd_fp8.h"

#include <cstdint>

#include "kernels/attn_fp8_common.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/attention/attn_fwd_fp8_launch.h"
#endif

namespace rt {

namespace {

const AttnFp8OpText kText{"the FP8 attention forward", " (no CPU backend)", "", ""};

// q (B,N,H,D), k and v (B,N,Hkv,D), bf16 on one CUDA device; N % 128 == 0, D == 128.
AttnDims fp8_fwd_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  return attn_fp8_input_dims(q, k, v, nullptr, kAttnFp8FwdBlock, op, kText);
}

void check_codes(const AttnFp8FwdCodes& c, const AttnDims& d, const Device& dev, const char* op) {
  const int64_t nblk = d.Nq / kAttnFp8FwdBlock;
  attn_fp8_check_operand(c.q, DType::e4m3, {d.B, d.Nq, d.H, d.D}, dev, op, "codes.q (B,N,H,D)");
  attn_fp8_check_operand(c.q_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.q_factor (B,H,N/128)");
  attn_fp8_check_operand(c.k, DType::e4m3, {d.B, d.Nq, d.Hkv, d.D}, dev, op, "codes.k (B,N,Hkv,D)");
  attn_fp8_check_operand(c.k_factor, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.k_factor (B,Hkv,N/128)");
  attn_fp8_check_operand(c.vt, DType::e4m3, {d.B, d.Hkv, d.D, d.Nq}, dev, op, "codes.vt (B,Hkv,D,N)");
  attn_fp8_check_operand(c.v_factor, DType::f32, {d.B, d.Hkv}, dev, op, "codes.v_factor (B,Hkv)");
  attn_fp8_check_operand(c.v_block_amax, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.v_block_amax (B,Hkv,N/128)");
}

}  // namespace

void attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes) {
  const char* op = "attn_fwd_fp8_quantize";
  const AttnDims d = fp8_fwd_dims(q, k, v, op);
  check_codes(codes, d, q.device, op);
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_fwd_fp8_quantize(q, k, v, codes, cuda::AttnFp8FwdDims{d.B, d.Nq, d.H, d.Hkv, d.D});
#else
  attn_fp8_refuse_no_cuda(op, kText);
#endif
}

void attn_fwd_fp8_from_codes(const AttnFp8FwdCodes& codes, bool causal, float softmax_scale, Tensor out,
                             Tensor lse) {
  const char* op = "attn_fwd_fp8_from_codes";
  RT_CHECK(out.device.is_cuda(), op << ": out is on " << out.device.str()
                                    << "; the FP8 attention forward is an H100 / H200 kernel only: pass CUDA tensors");
  RT_CHECK(out.ndim == 4, op << ": out is " << out.shape_str() << ", expected (B,N,H,D)");
  RT_CHECK(codes.k.defined() && codes.k.ndim == 4, op << ": codes.k is not a (B,N,Hkv,D) tensor");
  AttnDims d{out.shape[0], out.shape[1], out.shape[1], out.shape[2], codes.k.shape[2], out.shape[3], 1};
  RT_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0, op << ": H = " << d.H << " is not a multiple of Hkv = " << d.Hkv);
  RT_CHECK(d.D == 128 && d.Nq % kAttnFp8FwdBlock == 0 && d.Nq > 0,
           op << ": out " << out.shape_str() << "; the kernel takes D = 128 and N a positive multiple of 128");
  attn_fp8_check_operand(out, DType::bf16, {d.B, d.Nq, d.H, d.D}, out.device, op, "out (B,N,H,D)");
  attn_fp8_check_operand(lse, DType::f32, {d.B, d.H, d.Nq}, out.device, op, "lse (B,H,N)");
  check_codes(codes, d, out.device, op);
  RT_CHECK(softmax_scale > 0.f, op << ": softmax_scale = " << softmax_scale << " must be positive");
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_fwd_fp8(codes, cuda::AttnFp8FwdDims{d.B, d.Nq, d.H, d.Hkv, d.D}, causal, softmax_scale, out, lse);
#else
  (void)causal;
  attn_fp8_refuse_no_cuda(op, kText);
#endif
}

void attn_fwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float softmax_scale,
                             Tensor out, Tensor lse) {
  const char* op = "attn_fwd_fp8_experiment";
  const AttnDims d = fp8_fwd_dims(q, k, v, op);
  const int64_t nblk = d.Nq / kAttnFp8FwdBlock;
  const Device dev = q.device;
  // One allocation for the codes and factors (attn_fp8_with_scratch), in the order of AttnFp8FwdCodes' fields.
  const auto run = [&](char* const* part) {
    AttnFp8FwdCodes c;
    c.q = Tensor(part[0], DType::e4m3, dev, {d.B, d.Nq, d.H, d.D});
    c.q_factor = Tensor(part[1], DType::f32, dev, {d.B, d.H, nblk});
    c.k = Tensor(part[2], DType::e4m3, dev, {d.B, d.Nq, d.Hkv, d.D});
    c.k_factor = Tensor(part[3], DType::f32, dev, {d.B, d.Hkv, nblk});
    c.vt = Tensor(part[4], DType::e4m3, dev, {d.B, d.Hkv, d.D, d.Nq});
    c.v_factor = Tensor(part[5], DType::f32, dev, {d.B, d.Hkv});
    c.v_block_amax = Tensor(part[6], DType::f32, dev, {d.B, d.Hkv, nblk});
    attn_fwd_fp8_quantize(q, k, v, c);
    attn_fwd_fp8_from_codes(c, causal, softmax_scale, out, lse);
  };
  attn_fp8_with_scratch(q,
                        {d.B * d.Nq * d.H * d.D, d.B * d.H * nblk * 4, d.B * d.Nq * d.Hkv * d.D,
                         d.B * d.Hkv * nblk * 4, d.B * d.Hkv * d.D * d.Nq, d.B * d.Hkv * 4, d.B * d.Hkv * nblk * 4},
                        op, "attn_fwd_fp8_experiment frees its scratch", kText, run);
}

}  // namespace rt
