// The FP8 attention entry points' shared checks and scratch (kernels/attn_fp8_common.h).
#include "kernels/attn_fp8_common.h"

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device_memory.h"

#if RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace rt {

AttnDims attn_fp8_input_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* dout, int64_t block,
                             const char* op, const AttnFp8OpText& text) {
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(q.device.is_cuda(), op << ": q is on " << q.device.str() << "; " << text.kernel
                                  << " is an H100 / H200 kernel only" << text.on_cpu << ": pass CUDA tensors");
  const char* together = dout ? "q, k, v and dout" : "q, k and v";
  for (const Tensor* t : {&q, &k, &v, dout}) {
    if (!t) continue;
    const char* name = t == &q ? "q" : t == &k ? "k" : t == &v ? "v" : "dout";
    RT_CHECK(t->device == q.device, op << ": " << together << " must be on one device (q on " << q.device.str()
                                       << ", " << name << " on " << t->device.str() << ")");
    check_dtype(*t, DType::bf16, op, name);
    RT_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, op << ": " << name << " must be 16-byte aligned");
  }
  if (dout) check_shape(*dout, {d.B, d.Nq, d.H, d.D}, op, "dout (B,N,H,D)");
  RT_CHECK(d.Nq == d.Nk, op << ": Nq = " << d.Nq << " and Nk = " << d.Nk
                            << " differ; the experiment takes self-attention over one sequence (Nq == Nk)");
  RT_CHECK(d.D == 128, op << ": head dim " << d.D << "; " << text.kernel << " is written for D = 128 only"
                          << text.other_head_dims);
  RT_CHECK(d.Nq % block == 0 && d.Nq > 0, op << ": N = " << d.Nq << " is not a positive multiple of " << block
                                             << " (the kernel has no partial tiles); pad the sequence to a multiple "
                                                "of "
                                             << block);
  return d;
}

void attn_fp8_check_operand(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const Device& dev,
                            const char* op, const char* arg) {
  RT_CHECK(t.defined(), op << ": " << arg << " is not defined");
  RT_CHECK(t.device == dev, op << ": " << arg << " is on " << t.device.str() << ", the op on " << dev.str());
  check_dtype(t, dtype, op, arg);
  check_shape(t, dims, op, arg);
  RT_CHECK(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, op << ": " << arg << " must be 16-byte aligned");
}

void attn_fp8_refuse_no_cuda(const char* op, const AttnFp8OpText& text) {
  fail_at(__FILE__, __LINE__,
          std::string(op) + ": this build has no CUDA backend; " + text.kernel +
              " runs only on an H100 / H200 (configure with RINGTRAIN_CUDA=ON" + text.without_cuda + ")");
}

void attn_fp8_with_scratch(const Tensor& like, std::initializer_list<int64_t> part_bytes, const char* op,
                           const char* why, const AttnFp8OpText& text,
                           const std::function<void(char* const* parts)>& body) {
#if RINGTRAIN_HAVE_CUDA
  (void)text;
  std::vector<size_t> offsets;  // of each part in the scratch, 256-byte aligned
  size_t total = 0;
  for (int64_t bytes : part_bytes) {
    offsets.push_back(total);
    total += (size_t(bytes) + 255) / 256 * 256;
  }
  cuda::stream_for(like, op);  // selects like's device
  const Device dev = like.device;
  char* scratch = static_cast<char*>(device_alloc(dev, total));
  std::vector<char*> parts;
  for (size_t off : offsets) parts.push_back(scratch + off);
  try {
    body(parts.data());
  } catch (...) {
    device_free(dev, scratch);
    throw;
  }
  cuda::host_wait(cuda::current_stream(), why);
  device_free(dev, scratch);
#else
  (void)like, (void)part_bytes, (void)why, (void)body;
  attn_fp8_refuse_no_cuda(op, text);
#endif
}

}  // namespace rt
