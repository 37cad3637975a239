// The FP8 attention forward experiment's entry points (kernels/attn_fwd_fp8.h): the shape, dtype and device checks,
// then the CUDA launchers (kernels/cuda/attention/attn_fwd_fp8_launch.h). CUDA only: CPU tensors and builds
// without CUDA are refused with the reason.
#include "kernels/attn_fwd_fp8.h"

#include <cstdint>
#include <string>

#include "kernels/attention_shapes.h"
#include "kernels/device_memory.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/attention/attn_fwd_fp8_launch.h"
#include "kernels/cuda/runtime.h"
#endif

namespace rt {

namespace {

// q (B,N,H,D), k and v (B,N,Hkv,D), bf16 on one CUDA device; N % 128 == 0, D == 128.
AttnDims fp8_fwd_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(q.device.is_cuda(), op << ": q is on " << q.device.str()
                                  << "; the FP8 attention forward is an H100 / H200 kernel only (no CPU backend): "
                                     "pass CUDA tensors");
  for (const Tensor* t : {&q, &k, &v}) {
    RT_CHECK(t->device == q.device, op << ": q, k and v must be on one device (q on " << q.device.str() << ", "
                                       << t->shape_str() << " on " << t->device.str() << ")");
    check_dtype(*t, DType::bf16, op, t == &q ? "q" : t == &k ? "k" : "v");
    RT_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, op << ": q, k and v must be 16-byte aligned");
  }
  RT_CHECK(d.Nq == d.Nk, op << ": Nq = " << d.Nq << " and Nk = " << d.Nk
                            << " differ; the experiment takes self-attention over one sequence (Nq == Nk)");
  RT_CHECK(d.D == 128, op << ": head dim " << d.D << "; the FP8 kernel is written for D = 128 only");
  RT_CHECK(d.Nq % kAttnFp8FwdBlock == 0 && d.Nq > 0,
           op << ": N = " << d.Nq << " is not a positive multiple of " << kAttnFp8FwdBlock
              << " (the kernel has no partial tiles); pad the sequence");
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

void check_codes(const AttnFp8FwdCodes& c, const AttnDims& d, const Device& dev, const char* op) {
  const int64_t nblk = d.Nq / kAttnFp8FwdBlock;
  check_operand(c.q, DType::e4m3, {d.B, d.Nq, d.H, d.D}, dev, op, "codes.q (B,N,H,D)");
  check_operand(c.q_factor, DType::f32, {d.B, d.H, nblk}, dev, op, "codes.q_factor (B,H,N/128)");
  check_operand(c.k, DType::e4m3, {d.B, d.Nq, d.Hkv, d.D}, dev, op, "codes.k (B,N,Hkv,D)");
  check_operand(c.k_factor, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.k_factor (B,Hkv,N/128)");
  check_operand(c.vt, DType::e4m3, {d.B, d.Hkv, d.D, d.Nq}, dev, op, "codes.vt (B,Hkv,D,N)");
  check_operand(c.v_factor, DType::f32, {d.B, d.Hkv}, dev, op, "codes.v_factor (B,Hkv)");
  check_operand(c.v_block_amax, DType::f32, {d.B, d.Hkv, nblk}, dev, op, "codes.v_block_amax (B,Hkv,N/128)");
}

#if !RINGTRAIN_HAVE_CUDA
[[noreturn]] void refuse_no_cuda(const char* op) {
  fail_at(__FILE__, __LINE__,
          std::string(op) + ": this build has no CUDA backend; the FP8 attention forward runs only on an H100 / H200 "
                            "(configure with RINGTRAIN_CUDA=ON)");
}
#endif

}  // namespace

void attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes) {
  const char* op = "attn_fwd_fp8_quantize";
  const AttnDims d = fp8_fwd_dims(q, k, v, op);
  check_codes(codes, d, q.device, op);
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_fwd_fp8_quantize(q, k, v, codes, cuda::AttnFp8FwdDims{d.B, d.Nq, d.H, d.Hkv, d.D});
#else
  refuse_no_cuda(op);
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
  check_operand(out, DType::bf16, {d.B, d.Nq, d.H, d.D}, out.device, op, "out (B,N,H,D)");
  check_operand(lse, DType::f32, {d.B, d.H, d.Nq}, out.device, op, "lse (B,H,N)");
  check_codes(codes, d, out.device, op);
  RT_CHECK(softmax_scale > 0.f, op << ": softmax_scale = " << softmax_scale << " must be positive");
#if RINGTRAIN_HAVE_CUDA
  cuda::launch_attn_fwd_fp8(codes, cuda::AttnFp8FwdDims{d.B, d.Nq, d.H, d.Hkv, d.D}, causal, softmax_scale, out, lse);
#else
  (void)causal;
  refuse_no_cuda(op);
#endif
}

void attn_fwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float softmax_scale,
                             Tensor out, Tensor lse) {
  const char* op = "attn_fwd_fp8_experiment";
  const AttnDims d = fp8_fwd_dims(q, k, v, op);
#if RINGTRAIN_HAVE_CUDA
  const int64_t nblk = d.Nq / kAttnFp8FwdBlock;
  const Device dev = q.device;
  // One allocation for the codes and factors, each part 256-byte aligned.
  const int64_t sizes[7] = {d.B * d.Nq * d.H * d.D, d.B * d.H * nblk * 4, d.B * d.Nq * d.Hkv * d.D,
                            d.B * d.Hkv * nblk * 4, d.B * d.Hkv * d.D * d.Nq, d.B * d.Hkv * 4,
                            d.B * d.Hkv * nblk * 4};
  size_t offsets[7], total = 0;
  for (int i = 0; i < 7; ++i) {
    offsets[i] = total;
    total += (size_t(sizes[i]) + 255) / 256 * 256;
  }
  cuda::stream_for(q, op);  // selects q's device
  char* scratch = static_cast<char*>(device_alloc(dev, total));
  AttnFp8FwdCodes c;
  c.q = Tensor(scratch + offsets[0], DType::e4m3, dev, {d.B, d.Nq, d.H, d.D});
  c.q_factor = Tensor(scratch + offsets[1], DType::f32, dev, {d.B, d.H, nblk});
  c.k = Tensor(scratch + offsets[2], DType::e4m3, dev, {d.B, d.Nq, d.Hkv, d.D});
  c.k_factor = Tensor(scratch + offsets[3], DType::f32, dev, {d.B, d.Hkv, nblk});
  c.vt = Tensor(scratch + offsets[4], DType::e4m3, dev, {d.B, d.Hkv, d.D, d.Nq});
  c.v_factor = Tensor(scratch + offsets[5], DType::f32, dev, {d.B, d.Hkv});
  c.v_block_amax = Tensor(scratch + offsets[6], DType::f32, dev, {d.B, d.Hkv, nblk});
  try {
    attn_fwd_fp8_quantize(q, k, v, c);
    attn_fwd_fp8_from_codes(c, causal, softmax_scale, out, lse);
  } catch (...) {
    device_free(dev, scratch);
    throw;
  }
  cuda::host_wait(cuda::current_stream(), "attn_fwd_fp8_experiment frees its scratch");
  device_free(dev, scratch);
#else
  (void)d, (void)causal, (void)softmax_scale, (void)out, (void)lse;
  refuse_no_cuda(op);
#endif
}

}  // namespace rt
