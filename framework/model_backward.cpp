// The backward pass, layer by layer in reverse. Weight gradients accumulate (beta = 1) into grads_,
// which step() zeroes first; d_res_ carries d(loss)/d(residual stream) downwards.
#include "framework/model_internal.h"
#include "kernels/ops.h"

namespace rt {

void Model::backward() {
  const ModelShape& s = shape_;
  // Final RMSNorm: d_res = d(final_out) through the norm.
  fill(d_res_, 0.f);
  rmsnorm_bwd(d_res_, param_view(grads_, "norm.weight"), d_final_, residual_[size_t(s.L)],
              param_view(compute_, "norm.weight"), final_rstd_);
  for (int l = int(s.L) - 1; l >= 0; --l) {
    BlockActs& a = acts_for(l);
    if (options_.checkpointing == ActivationCheckpointing::full) block_forward(l, a, BlockPass::recompute);
    if (options_.checkpointing == ActivationCheckpointing::selective)
      block_forward(l, a, BlockPass::recompute_keep_attention);
    block_backward(l, a);
  }
  embedding_bwd(param_view(grads_, "tok_embeddings.weight"), d_res_, tokens_);
}

// On entry d_res_ = d(loss)/d(block output); on return d(loss)/d(block input).
void Model::block_backward(int layer, BlockActs& a) {
  const ModelShape& s = shape_;
  const LayerWeights w = layer_weights(compute_, layer);
  const LayerWeights dw = layer_weights(grads_, layer);
  const Tensor& x = residual_[size_t(layer)];  // (N, C)

  // MLP. proj is row-parallel: its input gradient is local; fc is column-parallel: d(ln2) is summed over tp.
  gemm(dw.proj_or_w2, d_res_, a.g, true, false, 1.f, 1.f);  // (C, Fl) += d_res^T (C, N) @ g (N, Fl)
  gemm(d_g_, d_res_, w.proj_or_w2, false, false);            // (N, Fl) = d_res (N, C) @ (C, Fl)
  if (s.swiglu) {
    swiglu_bwd(d_h_, d_u_, d_g_, a.h, a.u);
    gemm(dw.w3, d_u_, a.ln2, true, false, 1.f, 1.f);         // (Fl, C) += d_u^T @ ln2
  } else {
    gelu_bwd(d_h_, d_g_, a.h);
  }
  gemm(dw.fc_or_w1, d_h_, a.ln2, true, false, 1.f, 1.f);     // (Fl, C) += d_h^T @ ln2
  gemm(d_ln_, d_h_, w.fc_or_w1, false, false);                // (N, C) = d_h (N, Fl) @ (Fl, C)
  if (s.swiglu) gemm(d_ln_, d_u_, w.w3, false, false, 1.f, 1.f);
  if (s.tp > 1) tp_comm().all_reduce_sum(d_ln_);
  rmsnorm_bwd(d_res_, dw.mlp_norm, d_ln_, a.x_mid, w.mlp_norm, a.rstd2);  // d_res += through the norm

  // Attention. wo is row-parallel; wq, wk, wv column-parallel: d(ln1) is summed over tp.
  gemm(dw.wo, d_res_, a.att, true, false, 1.f, 1.f);  // (C, Hl*D) += d_res^T @ att
  gemm(d_att_, d_res_, w.wo, false, false);            // (N, Hl*D) = d_res (N, C) @ (C, Hl*D)
  const Tensor q4 = a.q.view({s.B, s.n, s.Hl, s.D});
  const Tensor k4 = a.k.view({s.B, s.n, s.Hkvl, s.D});
  const Tensor v4 = a.v.view({s.B, s.n, s.Hkvl, s.D});
  const Tensor dq4 = d_q_.view({s.B, s.n, s.Hl, s.D});
  const Tensor dk4 = d_k_.view({s.B, s.n, s.Hkvl, s.D});
  attention_->backward(q4, k4, v4, a.att.view({s.B, s.n, s.Hl, s.D}), d_att_.view({s.B, s.n, s.Hl, s.D}), a.lse,
                       dq4, dk4, d_v_.view({s.B, s.n, s.Hkvl, s.D}));
  // RoPE is a rotation: its backward rotates the gradient back.
  rope(dq4, positions_, config_.rope_base, true);
  rope(dk4, positions_, config_.rope_base, true);
  gemm(dw.wq, d_q_, a.ln1, true, false, 1.f, 1.f);  // (Hl*D, C) += d_q^T @ ln1
  gemm(dw.wk, d_k_, a.ln1, true, false, 1.f, 1.f);  // (Hkvl*D, C)
  gemm(dw.wv, d_v_, a.ln1, true, false, 1.f, 1.f);  // (Hkvl*D, C)
  gemm(d_ln_, d_q_, w.wq, false, false);             // (N, C) = d_q @ wq
  gemm(d_ln_, d_k_, w.wk, false, false, 1.f, 1.f);   // += d_k @ wk
  gemm(d_ln_, d_v_, w.wv, false, false, 1.f, 1.f);   // += d_v @ wv
  if (s.tp > 1) tp_comm().all_reduce_sum(d_ln_);
  rmsnorm_bwd(d_res_, dw.attn_norm, d_ln_, x, w.attn_norm, a.rstd1);
}

}  // namespace rt
