// cross_entropy on the host. logits (n,V) f32, targets (n) i32 (-1 = ignore), losses (n) f32.
//   losses = logsumexp(row) - row[target] (0 where ignored).
//   want_grad: logits are overwritten with grad_scale * (softmax - onehot), zero rows where ignored.
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

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
    float mx = row[0];
    for (int64_t c = 1; c < V; ++c) mx = row[c] > mx ? row[c] : mx;
    double sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(double(row[c] - mx));
    const double lse = double(mx) + std::log(sum);
    loss[r] = float(lse - double(row[t]));
    if (want_grad) {
      const float inv = float(1.0 / sum);
      for (int64_t c = 0; c < V; ++c) row[c] = grad_scale * (std::exp(row[c] - mx) * inv);
      row[t] -= grad_scale;
    }
  }
}

}  // namespace cpu
}  // namespace rt
