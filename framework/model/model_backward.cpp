// The backward pass, layer by layer in reverse. Weight gradients accumulate (beta = 1) into grads_,
// which step() zeroes first; d_res_ carries d(loss)/d(residual stream) downwards.
#include <algorithm>

#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {

void Model::backward() {
  const ModelShape& s = shape_;
  // Final RMSNorm: d_res = d(final_out) through the norm.
  const int head_unit = int(s.L) + 1;
  fill(d_res_, 0.f);
  rmsnorm_bwd(d_res_, param_view(unit_grads(head_unit), "norm.weight"), d_final_, residual_[size_t(s.L)],
              param_view(unit_weights(head_unit), "norm.weight"), final_rstd_);
  end_unit_grads(head_unit);  // zero 2/3: reduce-scattered while the layers run
  for (int l = int(s.L) - 1; l >= 0; --l) {
    BlockActs& a = acts_for(l);
    unit_weights(l + 1);       // zero 3: gathered again (the last two layers are still held from the forward)
    if (l > 0) prefetch_weights(l);  // the layer below, under this one's recompute and backward
    begin_unit_grads(l + 1);
    offload_wait_input(l);   // offload: this layer's input back on the device (posted one layer ahead)
    offload_prefetch(l - 1);
    if (options_.checkpointing == ActivationCheckpointing::full) block_forward(l, a, BlockPass::recompute);
    if (options_.checkpointing == ActivationCheckpointing::selective)
      block_forward(l, a, BlockPass::recompute_keep_attention);
    block_backward(l, a);
    end_unit_grads(l + 1);
  }
  embedding_bwd(param_view(unit_grads(0), "tok_embeddings.weight"), d_res_, tokens_);
  end_unit_grads(0);
}

// On entry d_res_ = d(loss)/d(block output); on return d(loss)/d(block input).
void Model::block_backward(int layer, BlockActs& a) {
  const ModelShape& s = shape_;
  const LayerWeights w = layer_weights(unit_weights(layer + 1), layer);
  const LayerWeights dw = layer_weights(unit_grads(layer + 1), layer);
  const Tensor& x = residual_[size_t(layer)];  // (N, C)
  const bool fp8 = fp8_layer(layer);

  // MLP, chunk by chunk of mlp_chunk_ tokens (the hidden recomputed per chunk unless kept). proj is
  // row-parallel: its input gradient is local; fc is column-parallel: d(ln2) is summed over tp. The weight
  // gradients accumulate over the chunks (beta = 1). SwiGLU's w1 and w3 are one (2Fl, C) weight [w1; w3]
  // (adjacent in the flat buffers of weights and gradients), so, as for GELU's fc, one gemm gives d(ln2) and one
  // the weight gradient, from d_h = d gate | d up (m, 2Fl).
  for (int64_t begin = 0; begin < s.N(); begin += mlp_chunk_) {
    const int64_t end = std::min(s.N(), begin + mlp_chunk_), m = end - begin;
    Tensor h, g;  // (m, Fl | 2Fl), (m, Fl)
    mlp_chunk_hidden(layer, a, begin, end, /*for_backward=*/true, h, g);
    const Tensor d_out = d_res_.slice(begin, end);  // (m, C)
    const Tensor ln2 = a.ln2.slice(begin, end);     // (m, C)
    const Tensor d_ln2 = d_ln_.slice(begin, end);   // (m, C)
    if (fp8) {  // precision fp8: model_fp8.cpp
      fp8_mlp_backward(layer, begin / mlp_chunk_, w, dw, ln2, h, g, d_out, d_ln2);
      continue;
    }
    const Tensor d_h = d_h_.slice(0, m);  // (m, Fl | 2Fl)
    gemm(dw.proj_or_w2, d_out, g, true, false, 1.f, 1.f);  // (C, Fl) += d_out^T (C, m) @ g (m, Fl)
    if (s.swiglu) {
      const Tensor d_g = d_g_.slice(0, m);           // (m, Fl)
      gemm(d_g, d_out, w.proj_or_w2, false, false);  // (m, Fl) = d_out (m, C) @ (C, Fl)
      swiglu_bwd(d_h, d_g, h);                       // (m, 2Fl) d gate | d up
    } else {
      linear_dgelu(d_h, d_out, w.proj_or_w2, h);  // d_h (m, Fl) = (d_out (m, C) @ (C, Fl)) * gelu'(h)
    }
    gemm(d_ln2, d_h, w.fc_or_w13, false, false);          // (m, C) = d_h (m, Fl | 2Fl) @ (Fl | 2Fl, C)
    gemm(dw.fc_or_w13, d_h, ln2, true, false, 1.f, 1.f);  // (Fl | 2Fl, C) += d_h^T @ ln2
  }
  if (s.tp > 1) tp_comm().all_reduce_sum(d_ln_);
  rmsnorm_bwd(d_res_, dw.mlp_norm, d_ln_, a.x_mid, w.mlp_norm, a.rstd2);  // d_res += through the norm

  // Attention. wo is row-parallel; wq, wk, wv column-parallel: d(ln1) is summed over tp.
  if (fp8) {
    fp8_attn_out_backward(layer, w, dw, a);
  } else {
    gemm(dw.wo, d_res_, a.att, true, false, 1.f, 1.f);  // (C, Hl*D) += d_res^T @ att
    gemm(d_att_, d_res_, w.wo, false, false);            // (N, Hl*D) = d_res (N, C) @ (C, Hl*D)
  }
  const Tensor q4 = a.q.view({s.B, s.n, s.Hl, s.D});
  const Tensor k4 = a.k.view({s.B, s.n, s.Hkvl, s.D});
  const Tensor v4 = a.v.view({s.B, s.n, s.Hkvl, s.D});
  const Tensor dq4 = d_q_.view({s.B, s.n, s.Hl, s.D});
  const Tensor dk4 = d_k_.view({s.B, s.n, s.Hkvl, s.D});
  attention_->backward(q4, k4, v4, a.att.view({s.B, s.n, s.Hl, s.D}), d_att_.view({s.B, s.n, s.Hl, s.D}), a.lse,
                       dq4, dk4, d_v_.view({s.B, s.n, s.Hkvl, s.D}));
  // RoPE is a rotation: its backward rotates the gradient back.
  rope_rows(dq4, true);
  rope_rows(dk4, true);
  if (fp8) {
    fp8_qkv_backward(layer, w, dw, a);
  } else {
    gemm(dw.wq, d_q_, a.ln1, true, false, 1.f, 1.f);  // (Hl*D, C) += d_q^T @ ln1
    gemm(dw.wk, d_k_, a.ln1, true, false, 1.f, 1.f);  // (Hkvl*D, C)
    gemm(dw.wv, d_v_, a.ln1, true, false, 1.f, 1.f);  // (Hkvl*D, C)
    gemm(d_ln_, d_q_, w.wq, false, false);             // (N, C) = d_q @ wq
    gemm(d_ln_, d_k_, w.wk, false, false, 1.f, 1.f);   // += d_k @ wk
    gemm(d_ln_, d_v_, w.wv, false, false, 1.f, 1.f);   // += d_v @ wv
  }
  if (s.tp > 1) tp_comm().all_reduce_sum(d_ln_);
  rmsnorm_bwd(d_res_, dw.attn_norm, d_ln_, x, w.attn_norm, a.rstd1);
}

}  // namespace rt
