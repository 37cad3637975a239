// The FP8 attention backward experiment's entry points (kernels/attn_bwd_fp8.h): the shape, dtype and device checks,
// then the CUDA launchers (kernels/cuda/attention/attn_bwd_fp8_launch.h). CUDA only: CPU tensors and builds without
// CUDA are refused with the reason (the CPU backend's FP8 backward is attn_bwd_block_fp8, kernels/attn_fp8.h).
#include "kernels/attn_bwd_fp8.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/attention_shapes.h"
#include "kernels/device_memory.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#include "kernels/cuda/runtime.h"
#endif

namespace rt {

namespace {

// q, dout (B,N,H,D), k (and v) (B,N,Hkv,D), bf16 on one CUDA device; N % 128 == 0, D == 128.
AttnDims fp8_bwd_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const char* op) {
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(q.device.is_cuda(), op << ": q is on " << q.device.str()
                                  << "; the FP8 attention backward kernel is an H100 / H200 kernel (the CPU backend "
                                     "runs attn_bwd_block_fp8): pass CUDA tensors");
  for (const Tensor* t : {&q, &k, &v, &dout}) {
    const char* name = t == &q ? "q" : t == &k ? "k" : t == &v ? "v" : "dout";
    RT_CHECK(t->device == q.device, op << ": q, k, v and dout must be on one device (q on " << q.device.str()
                                       << ", " << name << " on " << t->device.str() << ")");
    check_dtype(*t, DType::bf16, op, name);
    RT_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, op << ": " << name << " must be 16-byte aligned");
  }
  check_shape(dout, {d.B, d.Nq, d.H, d.D}, op, "dout (B,N,H,D)");
  RT_CHECK(d.Nq == d.Nk, op << ": Nq = " << d.Nq << " and Nk = " << d.Nk
                            << " differ; the experiment takes self-attention over one sequence (Nq == Nk)");
  RT_CHECK(d.D == 128, op << ": head dim " << d.D
                          << "; the FP8 backward kernel is written for D = 128 only (use attn_bwd_block, the bf16 "
                             "backward, for other head dims)");
  RT_CHECK(d.Nq % kAttnFp8BwdBlock == 0 && d.Nq > 0,
           op << ": N = " << d.Nq << " is not a positive multiple of " << kAttnFp8BwdBlock
              << " (the kernel has no partial tiles); pad the sequence to a multiple of 128");
  return d;
}

void check_operand(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const Device& dev,
                   const char* op, const char* arg) {
  RT_CHECK(t.defined(), op << ": " << arg << " is not defined");
  RT_CHECK(t.device == dev, op << ": " << arg << " is on " << t.device.str() << ", the op on " << dev.str());
  check_dtype(t, dtype, op, arg);
  check_shape(t, dims, op, arg);
  RT_CHECK(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, op << ": " << arg << " must be 16-byte aligned");
}

void check_codes(const AttnFp8BwdCodes& c, const AttnDims& d, const Device& dev, const char* op) {
  const int64_t nblk = d.Nq / kAttnFp8BwdBlock;
  check_operand(c.qt, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.qt (B,H,D,N)");
  check_operand(c.q_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.q_factor (B,H,N/128)");
  check_operand(c.dot, DType::e4m3, {d.B, d.H, d.D, d.Nq}, dev, op, "codes.dot (B,H,D,N)");
  check_operand(c.do_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.do_factor (B,H,N/128)");
  check_operand(c.kt, DType::e4m3, {d.B, d.Hkv, d.D, d.Nq}, dev, op, "codes.kt (B,Hkv,D,N)");
  check_operand(c.k_factor, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.k_factor (B,Hkv,N/128)");
}

#if RINGTRAIN_HAVE_CUDA
cuda::AttnFp8BwdDims launch_dims(const AttnDims& d) { return cuda::AttnFp8BwdDims{d.B, d.Nq, d.H, d.Hkv, d.D}; }
#else
[[noreturn]] void refuse_no_cuda(const char* op) {
  fail_at(__FILE__, __LINE__,
          std::string(op) + ": this build has no CUDA backend; the FP8 attention backward kernel runs only on an "
                            "H100 / H200 (configure with RINGTRAIN_CUDA=ON; on CPU ranks use attn_bwd_block_fp8)");
}
#endif

}  // namespace

void attn_bwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& dout, const AttnFp8BwdCodes& codes) {
  const char* op = "attn_bwd_fp8_quantize";
  const AttnDims d = fp8_bwd_dims(q, k, k, dout, op);
  check_codes(codes, d, q.device, op);
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_bwd_fp8_quantize(q, k, dout, codes, launch_dims(d));
#else
  refuse_no_cuda(op);
#endif
}

void attn_bwd_fp8_from_codes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, const AttnFp8BwdCodes& codes, bool causal, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_from_codes";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
  check_codes(codes, d, q.device, op);
  check_operand(lse, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "lse (B,H,N)");
  check_operand(delta, DType::f32, {d.B, d.H, d.Nq}, q.device, op, "delta (B,H,N)");
  check_operand(dq_acc, DType::f32, {d.B, d.Nq, d.H, d.D}, q.device, op, "dq_acc (B,N,H,D)");
  check_operand(dk_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dk_acc (B,N,Hkv,D)");
  check_operand(dv_acc, DType::f32, {d.B, d.Nk, d.Hkv, d.D}, q.device, op, "dv_acc (B,N,Hkv,D)");
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_bwd_fp8(q, k, v, dout, lse, delta, codes, launch_dims(d), causal, dq_acc, dk_acc, dv_acc);
#else
  (void)causal;
  refuse_no_cuda(op);
#endif
}

const char* attn_bwd_fp8_kernel_name() {
#if RINGTRAIN_HAVE_CUDA
  return cuda::attn_bwd_fp8_kernel_version() == 1 ? "v1" : "v2";
#else
  return "none";
#endif
}

void attn_bwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, bool causal, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc) {
  const char* op = "attn_bwd_fp8_experiment";
  const AttnDims d = fp8_bwd_dims(q, k, v, dout, op);
#if RINGTRAIN_HAVE_CUDA
  const int64_t nblk = d.Nq / kAttnFp8BwdBlock;
  const Device dev = q.device;
  // One allocation for the codes and factors, each part 256-byte aligned.
  const int64_t sizes[6] = {d.B * d.H * d.D * d.Nq, d.B * d.H * nblk * 4, d.B * d.H * d.D * d.Nq,
                            d.B * d.H * nblk * 4,   d.B * d.Hkv * d.D * d.Nq, d.B * d.Hkv * nblk * 4};
  size_t offsets[6], total = 0;
  for (int i = 0; i < 6; ++i) {
    offsets[i] = total;
    total += (size_t(sizes[i]) + 255) / 256 * 256;
  }
  cuda::stream_for(q, op);  // selects q's device
  char* scratch = static_cast<char*>(device_alloc(dev, total));
  AttnFp8BwdCodes c;
  c.qt = Tensor(scratch + offsets[0], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
  c.q_factor = Tensor(scratch + offsets[1], DType::f32, dev, {d.B, d.H, nblk});
  c.dot = Tensor(scratch + offsets[2], DType::e4m3, dev, {d.B, d.H, d.D, d.Nq});
  c.do_factor = Tensor(scratch + offsets[3], DType::f32, dev, {d.B, d.H, nblk});
  c.kt = Tensor(scratch + offsets[4], DType::e4m3, dev, {d.B, d.Hkv, d.D, d.Nq});
  c.k_factor = Tensor(scratch + offsets[5], DType::f32, dev, {d.B, d.Hkv, nblk});
  try {
    attn_bwd_fp8_quantize(q, k, dout, c);
    attn_bwd_fp8_from_codes(q, k, v, dout, lse, delta, c, causal, dq_acc, dk_acc, dv_acc);
  } catch (...) {
    device_free(dev, scratch);
    throw;
  }
  cuda::host_wait(cuda::current_stream(), "attn_bwd_fp8_experiment frees its scratch");
  device_free(dev, scratch);
#else
  (void)d, (void)lse, (void)delta, (void)causal, (void)dq_acc, (void)dk_acc, (void)dv_acc;
  refuse_no_cuda(op);
#endif
}

}  // namespace rt
