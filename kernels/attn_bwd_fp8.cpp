// The FP8 attention backward experiment's entry points (kernels/attn_bwd_fp8.h): the shape, dtype and device checks,
// then the CUDA launchers (kernels/cuda/attention/attn_bwd_fp8_launch.h). CUDA only: CPU tensors and builds without
// CUDA are refused with the reason (the CPU backend's FP8 backward is attn_bwd_block_fp8, kernels/attn_fp8.h).
#include "kernels/attn_bwd_fp8.h"

#include <cstdint>
#include <sstream>
#include <string>

#include "kernels/attention_shapes.h"
#include "kernels/attn_fp8_common.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#endif

namespace rt {

namespace {

const AttnFp8OpText kText{"the FP8 attention backward kernel", " (the CPU backend runs attn_bwd_block_fp8)",
                          "; on CPU ranks use attn_bwd_block_fp8",
                          " (use attn_bwd_block, the bf16 backward, for other head dims)"};

// q, dout (B,Nq,H,D), k (and v) (B,Nk,Hkv,D), bf16 on one CUDA device; Nq, Nk positive multiples of 128, D == 128.
// Nq == Nk: the shared check (attn_fp8_common, the forward's words); else the same checks with Nq != Nk allowed.
AttnDims fp8_bwd_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const char* op) {
  const AttnDims s = attn_shape_dims(q, k, v, op);
  if (s.Nq == s.Nk) return attn_fp8_input_dims(q, k, v, &dout, kAttnFp8BwdBlock, op, kText);
  // Nq != Nk (a ring block): the shared check on the queries (q as its own k, v: device, dtype, alignment, dout,
  // D, Nq), then k and v's rows, dtype, device and alignment here.
  attn_fp8_input_dims(q, q, q, &dout, kAttnFp8BwdBlock, op, kText);
  for (const Tensor* t : {&k, &v}) {
    const char* name = t == &k ? "k" : "v";
    RT_CHECK(t->device == q.device, op << ": q, k, v and dout must be on one device (q on " << q.device.str() << ", "
                                       << name << " on " << t->device.str() << ")");
    check_dtype(*t, DType::bf16, op, name);
    RT_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, op << ": " << name << " must be 16-byte aligned");
  }
  RT_CHECK(s.Nk % kAttnFp8BwdBlock == 0 && s.Nk > 0,
           op << ": Nk = " << s.Nk << " is not a positive multiple of " << kAttnFp8BwdBlock
              << " (the kernel has no partial tiles)");
  return s;
}

void check_codes(const AttnFp8BwdCodes& c, const AttnDims& d, const Device& dev, const char* op) {
  const int64_t qblk = d.Nq / kAttnFp8BwdBlock, kblk = d.Nk / kAttnFp8BwdBlock;
  attn_fp8_check_operand(c.qt, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.qt (B,H,D,Nq)");
  attn_fp8_check_operand(c.q_factor, DType::f32, {d.B, d.H, qblk}, dev, op, "codes.q_factor (B,H,Nq/128)");
  attn_fp8_check_operand(c.dot, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.dot (B,H,D,Nq)");
  attn_fp8_check_operand(c.do_factor, DType::f32, {d.B, d.H, qblk}, dev, op, "codes.do_factor (B,H,Nq/128)");
  attn_fp8_check_operand(c.kt, DType::e4m3, {d.B, d.Hkv, d.D, d.Nk}, dev, op, "codes.kt (B,Hkv,D,Nk)");
  attn_fp8_check_operand(c.k_factor, DType::f32, {d.B, d.Hkv, kblk}, dev, op, "codes.k_factor (B,Hkv,Nk/128)");
}

#if RINGTRAIN_HAVE_CUDA
cuda::AttnFp8BwdDims launch_dims(const AttnDims& d) {
  return cuda::AttnFp8BwdDims{d.B, d.Nq, d.Nk, d.H, d.Hkv, d.D};
}
#endif

}  // namespace

bool attn_bwd_fp8_cuda_supports(const AttnMask& mask, int64_t Nq, int64_t Nk, int64_t D, std::string* why) {
  std::ostringstream reason;
  const int64_t q_end = mask.q_end < 0 ? Nq : mask.q_end, k_end = mask.k_end < 0 ? Nk : mask.k_end;
  if (mask.docs.on()) {
    reason << "documents (mask.docs) are not supported by the FP8 attention backward kernel (causal or full masks "
              "with offsets and row ranges only)";
  } else if (D != 128) {
    reason << "head dim " << D << ": the FP8 attention backward kernel takes D = 128 only";
  } else if (Nq <= 0 || Nk <= 0 || Nq % kAttnFp8BwdBlock != 0 || Nk % kAttnFp8BwdBlock != 0) {
    reason << "Nq = " << Nq << ", Nk = " << Nk << ": the FP8 attention backward kernel takes positive multiples of "
           << kAttnFp8BwdBlock << " (no partial tiles)";
  } else if (!(0 <= mask.q_begin && mask.q_begin <= q_end && q_end <= Nq && 0 <= mask.k_begin &&
               mask.k_begin <= k_end && k_end <= Nk)) {
    reason << "row ranges [" << mask.q_begin << "," << mask.q_end << ") x [" << mask.k_begin << "," << mask.k_end
           << ") are outside the " << Nq << " query and " << Nk << " key rows";
  }
  const std::string r = reason.str();
  if (why) *why = r;
  return r.empty();
}

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
                             const Tensor& delta, const AttnFp8BwdCodes& codes, const AttnMask& mask, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_from_codes";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
  std::string why;
  RT_CHECK(attn_bwd_fp8_cuda_supports(mask, d.Nq, d.Nk, d.D, &why), op << ": " << why);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  check_codes(codes, d, q.device, op);
  attn_fp8_check_operand(lse, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "lse (B,H,Nq)");
  attn_fp8_check_operand(delta, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "delta (B,H,Nq)");
  attn_fp8_check_operand(dq_acc, DType::f32, {d.B, d.Nq, d.H, d.D}, q.device, op, "dq_acc (B,Nq,H,D)");
  attn_fp8_check_operand(dk_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dk_acc (B,Nk,Hkv,D)");
  attn_fp8_check_operand(dv_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dv_acc (B,Nk,Hkv,D)");
#if RINGTRAIN_HAVE_CUDA
  if (r.q_begin == r.q_end || r.k_begin == r.k_end) return;  // no pair takes part (the CPU op's early return)
  const cuda::AttnFp8BwdMask m{mask.causal, mask.causal ? mask.q_offset - mask.k_offset : 0, r.q_begin, r.q_end,
                               r.k_begin, r.k_end};
  cuda::launch_attn_bwd_fp8(q, k, v, dout, lse, delta, codes, launch_dims(d), m, dq_acc, dk_acc, dv_acc);
#else
  (void)r;
  attn_fp8_refuse_no_cuda(op, kText);
#endif
}

void attn_bwd_fp8_from_codes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, const AttnFp8BwdCodes& codes, bool causal, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc) {
  AttnMask mask;
  mask.causal = causal;
  attn_bwd_fp8_from_codes(q, k, v, dout, lse, delta, codes, mask, dq_acc, dk_acc, dv_acc);
}

void attn_bwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, bool causal, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_experiment";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
  const int64_t nblk = d.Nq / kAttnFp8BwdBlock, kblk = d.Nk / kAttnFp8BwdBlock;
  const Device dev = q.device;
  // One allocation for the codes and factors (attn_fp8_with_scratch), in the order of AttnFp8BwdCodes' fields.
  const auto run = [&](char* const* part) {
    AttnFp8BwdCodes c;
    c.qt = Tensor(part[0], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
    c.q_factor = Tensor(part[1], DType::f32, dev, {d.B, d.H, nblk});
    c.dot = Tensor(part[2], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
    c.do_factor = Tensor(part[3], DType::f32, dev, {d.B, d.H, nblk});
    c.kt = Tensor(part[4], DType::e4m3, dev, {d.B, d.Hkv, d.D, d.Nk});
    c.k_factor = Tensor(part[5], DType::f32, dev, {d.B, d.Hkv, kblk});
    attn_bwd_fp8_quantize(q, k, dout, c);
    attn_bwd_fp8_from_codes(q, k, v, dout, lse, delta, c, causal, dq_acc, dk_acc, dv_acc);
  };
  attn_fp8_with_scratch(q,
                        {d.B * d.H * d.D * d.Nq, d.B * d.H * nblk * 4, d.B * d.H * d.D * d.Nq, d.B * d.H * nblk * 4,
                         d.B * d.Hkv * d.D * d.Nk, d.B * d.Hkv * kblk * 4},
                        op, "attn_bwd_fp8_experiment frees its scratch", kText, run);
}

}  // namespace rt
