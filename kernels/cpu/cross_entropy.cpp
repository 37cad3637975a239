// cross_entropy on the host. logits (n,V) f32, targets (n) i32 (-1 = ignore), losses (n) f32.
//   losses = logsumexp(row) - row[target] (0 where ignored), the row sum accumulated in fp64.
//   want_grad: logits are overwritten with grad_scale * (softmax - onehot), zero rows where ignored.
// One vectorised exp pass per row (kernels/cpu/simd_exp2.h); exp(x - max) = exp2((x - max) * log2 e).
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/simd_exp2.h"

namespace rt {
namespace cpu {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Loss of one row (target t valid); with want_grad the row becomes grad_scale * (softmax - onehot).
__attribute__((always_inline)) inline float row_loss(float* row, int64_t V, int64_t t, float grad_scale,
                                                     bool want_grad) {
  float mx = row[0];
  for (int64_t c = 1; c < V; ++c) mx = row[c] > mx ? row[c] : mx;
  const float target_logit = row[t];
  const double sum = simd_exp2_sum(row, want_grad ? row : nullptr, V, mx, kLog2e);  // row = exp(row - mx)
  const float loss = float(double(mx) + std::log(sum) - double(target_logit));
  if (want_grad) {
    const float k = float(double(grad_scale) / sum);
    for (int64_t c = 0; c < V; ++c) row[c] *= k;
    row[t] -= grad_scale;
  }
  return loss;
}

__attribute__((target("avx2,fma"))) float row_loss_avx2(float* row, int64_t V, int64_t t, float grad_scale,
                                                        bool want_grad) {
  return row_loss(row, V, t, grad_scale, want_grad);
}
float row_loss_baseline(float* row, int64_t V, int64_t t, float grad_scale, bool want_grad) {
  return row_loss(row, V, t, grad_scale, want_grad);
}

}  // namespace

void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad) {
  const char* op = "cross_entropy";
  require_cpu_f32(logits, op, "logits");
  require_cpu_i32(targets, op, "targets");
  require_cpu_f32(losses, op, "losses");
  RT_CHECK(logits.ndim == 2, op << ": logits has shape " << logits.shape_str() << ", expected (n,V)");
  const int64_t n = logits.shape[0], V = logits.shape[1];
  check_shape(targets, {n}, op, "targets (n)");
  check_shape(losses, {n}, op, "losses (n)");
  const int32_t* tgt = targets.ptr<int32_t>();  // (n)
  float* pl = logits.ptr<float>();              // (n,V)
  float* loss = losses.ptr<float>();            // (n)
  const bool avx2 = use_avx2_fma();
  for (int64_t r = 0; r < n; ++r) {
    float* row = pl + r * V;  // (V)
    const int64_t t = tgt[r];
    if (t == -1) {
      loss[r] = 0.f;
      if (want_grad)
        for (int64_t c = 0; c < V; ++c) row[c] = 0.f;
      continue;
    }
    RT_CHECK(t >= 0 && t < V, op << ": target " << t << " at row " << r << " is outside [0," << V
                                 << ") and is not -1 (ignore); check the labels against model.vocab_size");
    loss[r] = avx2 ? row_loss_avx2(row, V, t, grad_scale, want_grad)
                   : row_loss_baseline(row, V, t, grad_scale, want_grad);
  }
}

}  // namespace cpu
}  // namespace rt
