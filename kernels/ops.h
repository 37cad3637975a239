// The ops interface: one signature per op, the same on every device. Each dispatches on its tensors'
// device (and dtype) to kernels/cpu/<op>.cpp or kernels/cuda/<op>.cu (kernels/ops.cpp).
// The ops and their contracts are listed once, in kernels/op_list.inc; this header declares them in rt::.
//   CPU path: every float tensor is f32. CUDA path: activations and compute weights bf16, accumulators
//   (gradients of weights, optimizer state, norms' rstd) f32.
#pragma once
#include "kernels/fp8.h"
#include "kernels/rope_freqs.h"
#include "kernels/strided_rows.h"
#include "kernels/tensor.h"

namespace rt {

struct AdamWArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};

#define RT_OP(ret, name, params, args, first, dispatch) ret name params;
#include "kernels/op_list.inc"

// Default arguments (a later declaration may add them; the signatures are those of op_list.inc).
void gemm(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
          float beta = 0.f);
void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWArgs& args, Tensor param_lowp,
           const Tensor& grad_scale = Tensor{});

// ---- composite ops (built from the listed ops on any device; not in the op list) ----
// Fused, chunked LM head + cross-entropy (kernels/lm_head_loss.cpp): never materialises (N,V) logits.
//   x (N,C), w (V,C), targets (N) i32, losses (N) f32 (written),
//   scratch (chunk,V) in x's dtype, the chunk is scratch.size(0).
//   dx (N,C) written when defined; dw (V,C) f32 accumulates when defined. grad_scale multiplies both.
void lm_head_loss(const Tensor& x, const Tensor& w, const Tensor& targets, Tensor losses, Tensor scratch,
                  Tensor dx, Tensor dw, float grad_scale);

}  // namespace rt
