// Fused, chunked LM head + cross-entropy on any device, built from rt::gemm and rt::cross_entropy, so
// the (N,V) logits never exist: only one (chunk,V) block of them, in `scratch`, at a time.
//   per chunk of rows [n0, n1):  logits = x[n0:n1] @ w^T
//                                cross_entropy -> losses[n0:n1]; logits become grad_scale*(softmax-onehot)
//                                dx[n0:n1] = dlogits @ w;  dw += dlogits^T @ x[n0:n1]
#include "kernels/ops.h"

namespace rt {

void lm_head_loss(const Tensor& x, const Tensor& w, const Tensor& targets, Tensor losses, Tensor scratch, Tensor dx,
                  Tensor dw, float grad_scale) {
  const char* op = "lm_head_loss";
  RT_CHECK(x.ndim == 2, op << ": x has shape " << x.shape_str() << ", expected (N,C)");
  RT_CHECK(w.ndim == 2, op << ": w has shape " << w.shape_str() << ", expected (V,C)");
  const int64_t N = x.shape[0], C = x.shape[1], V = w.shape[0];
  check_shape(w, {V, C}, op, "w (V,C)");
  check_shape(targets, {N}, op, "targets (N)");
  check_shape(losses, {N}, op, "losses (N)");
  RT_CHECK(scratch.defined() && scratch.ndim == 2 && scratch.shape[0] > 0 && scratch.shape[1] == V,
           op << ": scratch has shape " << scratch.shape_str() << ", expected (chunk," << V
              << ") with chunk >= 1");
  check_dtype(scratch, x.dtype, op, "scratch");
  check_same_device(x, w, op);
  check_same_device(x, scratch, op);
  if (dx.defined()) check_shape(dx, {N, C}, op, "dx (N,C)");
  if (dw.defined()) {
    check_shape(dw, {V, C}, op, "dw (V,C)");
    check_dtype(dw, DType::f32, op, "dw");
  }
  const bool want_grad = dx.defined() || dw.defined();
  const int64_t chunk = scratch.shape[0];
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t n1 = n0 + chunk < N ? n0 + chunk : N;
    Tensor logits = scratch.slice(0, n1 - n0);  // (n1-n0, V)
    const Tensor xc = x.slice(n0, n1);          // (n1-n0, C)
    gemm(logits, xc, w, false, true, 1.f, 0.f);
    cross_entropy(logits, targets.slice(n0, n1), losses.slice(n0, n1), grad_scale, want_grad);
    if (dx.defined()) gemm(dx.slice(n0, n1), logits, w, false, false, 1.f, 0.f);
    if (dw.defined()) gemm(dw, logits, xc, true, false, 1.f, 1.f);
  }
}

}  // namespace rt
