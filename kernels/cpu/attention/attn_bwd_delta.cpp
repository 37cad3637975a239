// attn_bwd_delta on the host: delta (B,H,Nq) = rowsum(dout * out) over D, accumulated in fp64.
#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_bwd_delta(const Tensor& out, const Tensor& dout, Tensor delta) {
  const char* op = "attn_bwd_delta";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(delta, op, "delta");
  RT_CHECK(out.ndim == 4, op << ": out has shape " << out.shape_str() << ", expected (B,Nq,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3];
  check_shape(dout, {B, Nq, H, D}, op, "dout (B,Nq,H,D)");
  check_shape(delta, {B, H, Nq}, op, "delta (B,H,Nq)");
  const float* o = out.ptr<float>();    // (B,Nq,H,D)
  const float* g = dout.ptr<float>();   // (B,Nq,H,D)
  float* dl = delta.ptr<float>();       // (B,H,Nq)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Nq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * Nq + i) * H + h) * D;
        double s = 0;
        for (int64_t e = 0; e < D; ++e) s += double(o[off + e]) * double(g[off + e]);
        dl[(b * H + h) * Nq + i] = float(s);
      }
}

}  // namespace cpu
}  // namespace rt
