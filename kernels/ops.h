// The ops interface: one signature per op, the same on every device. Each dispatches on its tensors'
// device (and dtype) to kernels/cpu/<op>.cpp or kernels/cuda/<op>.cu.
// Conventions:
//   N = tokens (B*T flattened), C = model dim, F = MLP hidden dim, V = vocab, H = heads, D = head dim.
//   CPU path: every float tensor is f32. CUDA path: activations and compute weights bf16, accumulators
//   (gradients of weights, optimizer state, norms' rstd) f32.
//   "accumulates" means out += result; otherwise out is overwritten.
#pragma once
#include "kernels/tensor.h"

namespace rt {

// ---- dense ----
// c (M,N) = alpha * op(a) @ op(b) + beta * c. op(a) is (M,K): a is (M,K), or (K,M) when trans_a.
// op(b) is (K,N): b is (K,N), or (N,K) when trans_b. A Linear y = x W^T with W (out,in) is
// gemm(y, x, W, false, true). c may be f32 or bf16; a and b share one dtype.
void gemm(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
          float beta = 0.f);

// ---- norms ----
// out (N,C) = x * rsqrt(mean(x^2) + eps) * weight; rstd (N) f32 is saved for the backward.
void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& weight, float eps);
// dx (N,C) accumulates (it is the residual-stream gradient); dweight (C) f32 accumulates.
void rmsnorm_bwd(Tensor dx, Tensor dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                 const Tensor& rstd);

// ---- positions ----
// x (B,T,H,D) rotated in place. Pairs (i, i+D/2) within each head, angle pos * base^(-2i/D).
// positions (T) i32 are global token indices. inverse=true rotates by -angle (the backward).
void rope(Tensor x, const Tensor& positions, float base, bool inverse);

// ---- activations ----
// GELU, tanh approximation. out, x: (N,F).
void gelu_fwd(Tensor out, const Tensor& x);
// dx (N,F) overwritten.
void gelu_bwd(Tensor dx, const Tensor& dout, const Tensor& x);
// out (N,F) = silu(gate) * up.
void swiglu_fwd(Tensor out, const Tensor& gate, const Tensor& up);
// dgate, dup (N,F) overwritten.
void swiglu_bwd(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up);

// ---- embedding ----
// out (N,C) = table[tokens]; tokens (N) i32; table (V,C).
void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table);
// dtable (V,C) f32 accumulates dout (N,C) rows at tokens.
void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& tokens);

// ---- loss ----
// logits (n,V): on return, when want_grad, holds grad_scale * (softmax - onehot) (zero rows where the
// target is ignored); losses (n) f32 = -log softmax[target] (0 where ignored). targets (n) i32; -1 = ignore.
void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad);

// Fused, chunked LM head + cross-entropy: never materialises (N,V) logits.
//   x (N,C), w (V,C), targets (N) i32, losses (N) f32 (written),
//   scratch (chunk,V) in x's dtype, the chunk is scratch.size(0).
//   dx (N,C) written when defined; dw (V,C) f32 accumulates when defined. grad_scale multiplies both.
void lm_head_loss(const Tensor& x, const Tensor& w, const Tensor& targets, Tensor losses, Tensor scratch,
                  Tensor dx, Tensor dw, float grad_scale);

// ---- optimizer ----
struct AdamWArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};
// param, grad, m, v: same shape, f32. Decoupled weight decay: p -= lr*wd*p. When param_lowp (bf16) is
// defined it receives the updated weights (the compute copy on CUDA). When grad_scale (1) f32 on param's
// device is defined, the update uses grad * grad_scale[0] (the clip factor, read on the device: no host
// wait); grad itself is not changed. A non-finite grad_scale[0] skips the update: param, m, v and param_lowp
// stay as they were (the divergence guard: grad_clip_scale writes NaN for a non-finite norm).
void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWArgs& args, Tensor param_lowp,
           const Tensor& grad_scale = Tensor{});
// Global-norm clipping without a host wait. sumsq (1), scale (1) or (2) f32 on one device.
// scale[0] = max_norm / (norm + 1e-6) when max_norm > 0 and norm = sqrt(sumsq) > max_norm, else 1; NaN when the
// norm is not finite (adamw then skips the step), and then scale[1], when present, is incremented (a count of
// skipped steps the host reads when it logs).
void grad_clip_scale(const Tensor& sumsq, Tensor scale, float max_norm);

// ---- elementwise and reductions ----
void add_inplace(Tensor y, const Tensor& x);   // y += x (same shape)
void scale_inplace(Tensor y, float s);          // y *= s
void fill(Tensor y, float value);
void copy_cast(Tensor out, const Tensor& in);   // same shape, any float dtypes; across devices too
double sum_squares(const Tensor& x);            // sum of x^2 in fp64 on the host (synchronises)
// acc (1) f32 on x's device += sum of x^2 (summed in fp64 within the call). Does not synchronise.
void sum_squares_accumulate(const Tensor& x, Tensor acc);

}  // namespace rt
