// attn_fwd_merge on the host: two finalized results of the same rows (over disjoint keys) into the result over both,
// row by row in the natural-log lse of the kernels: lse' = logaddexp(lse, lse2), out' = out e^(lse - lse') +
// out2 e^(lse2 - lse'). A side with lse = -inf saw no key: weight 0, its out not read (no NaN from -inf - -inf).
#include <cmath>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_fwd_merge(Tensor out, Tensor lse, const Tensor& out2, const Tensor& lse2, int64_t q_begin) {
  const char* op = "attn_fwd_merge";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(lse, op, "lse");
  require_cpu_f32(out2, op, "out2");
  require_cpu_f32(lse2, op, "lse2");
  RT_CHECK(out.ndim == 4 && out2.ndim == 4, op << ": out " << out.shape_str() << " and out2 " << out2.shape_str()
                                               << " must be (B,Nq,H,D) and (B,M,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3], M = out2.shape[1];
  check_shape(out2, {B, M, H, D}, op, "out2 (B,M,H,D)");
  check_shape(lse, {B, H, Nq}, op, "lse (B,H,Nq)");
  check_shape(lse2, {B, H, M}, op, "lse2 (B,H,M)");
  RT_CHECK(q_begin >= 0 && q_begin + M <= Nq, op << ": rows [" << q_begin << ", " << q_begin + M
                                                 << ") of out2 do not fit the " << Nq << " rows of out");
  float* o = out.ptr<float>();          // (B, Nq, H, D)
  float* ls = lse.ptr<float>();         // (B, H, Nq)
  const float* o2 = out2.ptr<float>();  // (B, M, H, D)
  const float* ls2 = lse2.ptr<float>();  // (B, H, M)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < M; ++i) {
        const float l2 = ls2[(b * H + h) * M + i];
        if (l2 == -INFINITY) continue;  // result 2 saw no key: the row stays
        float& l1 = ls[(b * H + h) * Nq + q_begin + i];
        float* a = o + ((b * Nq + q_begin + i) * H + h) * D;  // (D)
        const float* a2 = o2 + ((b * M + i) * H + h) * D;     // (D)
        const float mx = std::max(l1, l2);
        const float w1 = l1 == -INFINITY ? 0.f : std::exp(l1 - mx), w2 = std::exp(l2 - mx);
        const float sum = w1 + w2, c1 = w1 / sum, c2 = w2 / sum;
        for (int64_t e = 0; e < D; ++e) a[e] = (c1 == 0.f ? 0.f : a[e] * c1) + a2[e] * c2;
        l1 = mx + std::log(sum);
      }
}

}  // namespace cpu
}  // namespace rt
