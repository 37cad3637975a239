// The forward pass, top to bottom, and the fused LM head + loss (which also starts the backward).
#include <algorithm>

#include "framework/model/fp8_linear.h"
#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {

// One block. Reads residual_[layer]; writes acts and, in the forward pass, residual_[layer + 1]. The
// recomputes for the backward skip the MLP output projection (the backward does not need it), and
// recompute_keep_attention also the ring attention, whose output and LSE were kept.
// Residual adds are fused with the norm that reads their sum (add_rmsnorm_fwd): the attention residual with the
// MLP norm, and, in the forward pass, the block's output residual with the next block's attention norm (or the
// final norm), so in the forward pass a block after the first finds ln1 / rstd1 already written.
void Model::block_forward(int layer, BlockActs& a, BlockPass pass) {
  const ModelShape& s = shape_;
  const LayerWeights w = layer_weights(unit_weights(layer + 1), layer);
  const Tensor& x = residual_[size_t(layer)];  // (N, C)

  // Attention: RMSNorm -> q, k, v (local heads) -> RoPE -> ring attention -> wo -> all-reduce over tp.
  if (pass != BlockPass::forward || layer == 0) rmsnorm_fwd(a.ln1, a.rstd1, x, w.attn_norm, config_.norm_eps);
  const bool fp8 = fp8_layer(layer);  // precision fp8: the block's linear GEMMs in model_fp8.cpp
  if (fp8) {
    fp8_qkv_forward(layer, w, a);
  } else {
    gemm(a.q, a.ln1, w.wq, false, true);  // (N, Hl*D) = (N, C) @ (Hl*D, C)^T
    gemm(a.k, a.ln1, w.wk, false, true);  // (N, Hkvl*D)
    gemm(a.v, a.ln1, w.wv, false, true);  // (N, Hkvl*D)
  }
  const Tensor q4 = a.q.view({s.B, s.n, s.Hl, s.D});
  const Tensor k4 = a.k.view({s.B, s.n, s.Hkvl, s.D});
  const Tensor v4 = a.v.view({s.B, s.n, s.Hkvl, s.D});
  rope_rows(q4, false);
  rope_rows(k4, false);
  if (kv_capture_ && pass == BlockPass::forward) capture_kv(layer, a.k, a.v);  // generate's prefill
  if (chunk_.cache && pass == BlockPass::forward)  // generate's chunked prefill: against the KV cache
    chunk_attention(layer, q4, a.k, a.v, a.att.view({s.B, s.n, s.Hl, s.D}), a.lse);
  else if (pass != BlockPass::recompute_keep_attention)
    attention_->forward(q4, k4, v4, a.att.view({s.B, s.n, s.Hl, s.D}), a.lse);
  if (fp8) fp8_attn_out_forward(layer, w, a);
  else gemm(a.x_mid, a.att, w.wo, false, true);  // (N, C) = (N, Hl*D) @ (C, Hl*D)^T, partial over tp
  if (s.tp > 1) tp_comm().all_reduce_sum(a.x_mid);
  // MLP: RMSNorm -> fc | [w1; w3] (one gemm) -> GELU | SwiGLU -> proj | w2 -> all-reduce over tp, chunk by chunk of
  // mlp_chunk_ tokens (rows are independent). The recomputes stop at ln2 unless the hidden is kept: the
  // backward recomputes each chunk's hidden just before using it.
  add_rmsnorm_fwd(a.x_mid, x, a.ln2, a.rstd2, w.mlp_norm, config_.norm_eps);  // x_mid += x; ln2 = norm(x_mid)
  if (pass != BlockPass::forward) return;
  offload_before_output(layer);  // its output buffer may be staging that the layer before is still copying out
  Tensor out = residual_[size_t(layer) + 1];  // (N, C)
  for (int64_t begin = 0; begin < s.N(); begin += mlp_chunk_) {
    const int64_t end = std::min(s.N(), begin + mlp_chunk_);
    Tensor h, g;  // (m, Fl | 2Fl), (m, Fl) with m = end - begin
    mlp_chunk_hidden(layer, a, begin, end, /*for_backward=*/false, h, g);
    if (fp8) fp8_mlp_out_forward(layer, begin / mlp_chunk_, w, g, out.slice(begin, end));
    else gemm(out.slice(begin, end), g, w.proj_or_w2, false, true);  // (m, C) = (m, Fl) @ (C, Fl)^T, partial over tp
  }
  if (s.tp > 1) tp_comm().all_reduce_sum(out);
  // out += x_mid, and the norm of out that reads it next: the next block's ln1, or the final norm.
  if (layer + 1 < s.L) {
    BlockActs& next = acts_for(layer + 1);
    add_rmsnorm_fwd(out, a.x_mid, next.ln1, next.rstd1, layer_weights(unit_weights(layer + 2), layer + 1).attn_norm,
                    config_.norm_eps);
  } else {
    add_rmsnorm_fwd(out, a.x_mid, final_out_, final_rstd_, param_view(unit_weights(int(s.L) + 1), "norm.weight"),
                    config_.norm_eps);
  }
}

// ln2 (m, C) -> h (m, Fl) GELU | (m, 2Fl) SwiGLU gate|up -> g (m, Fl).
void Model::mlp_hidden_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& ln2, Tensor h,
                               Tensor g) {
  if (fp8_layer(layer)) {  // the GEMM in FP8 (with its GELU fused, model_fp8.cpp), then SwiGLU
    fp8_mlp_in_forward(layer, chunk, w, ln2, h, g);
    if (shape_.swiglu) swiglu_fwd(g, h);
    return;
  }
  if (shape_.swiglu) {
    gemm(h, ln2, w.fc_or_w13, false, true);  // (m, 2Fl) = (m, C) @ [w1; w3] (2Fl, C)^T: gate | up per row
    swiglu_fwd(g, h);                        // (m, Fl) = silu(gate) * up
  } else {
    linear_gelu_fwd(g, h, ln2, w.fc_or_w13);  // h (m, Fl) = ln2 (m, C) @ (Fl, C)^T, g = gelu(h)
  }
}

// Rows [begin, end) of the MLP hidden, ready to read: under no checkpointing computed into the layer's kept
// (N, Fl) buffers on the forward pass and only viewed afterwards; otherwise computed into the shared
// (chunk, Fl) buffers every time (the forward, and again in the backward).
void Model::mlp_chunk_hidden(int layer, BlockActs& a, int64_t begin, int64_t end, bool for_backward, Tensor& h,
                             Tensor& g) {
  const int64_t m = end - begin;
  const bool kept = keep_mlp_hidden_;
  h = kept ? a.h.slice(begin, end) : a.h.slice(0, m);  // (m, Fl | 2Fl)
  g = kept ? a.g.slice(begin, end) : a.g.slice(0, m);  // (m, Fl)
  if (kept && for_backward) return;
  mlp_hidden_forward(layer, begin / mlp_chunk_, layer_weights(unit_weights(layer + 1), layer), a.ln2.slice(begin, end),
                     h, g);
}

std::vector<float> Model::step(const Batch& batch, double global_count, bool want_grad) {
  forward_backward(batch, global_count, want_grad);
  std::vector<float> losses(size_t(shape_.N()));
  copy_tensor_to_host(losses.data(), losses_);
  return losses;
}

void Model::forward_backward(const Batch& batch, double global_count, bool want_grad) {
  const ModelShape& s = shape_;
  RT_CHECK(!want_grad || !options_.forward_only, "model: a backward on a model built forward-only (eval and generate "
                                                 "keep no activations for one); build it with an optimizer");
  upload_batch(batch);
  offload_begin_step(want_grad);
  if (fp8_) fp8_->begin_step();
  const int head_unit = int(s.L) + 1;
  // Unit by unit; at zero 3 each unit's gather is posted one unit ahead (prefetch) so that it runs under the
  // current unit's compute, and unit_weights() waits for it.
  prefetch_weights(0);
  const Tensor embedding = unit_weights(0);
  prefetch_weights(1);
  embedding_fwd(residual_[0], tokens_, param_view(embedding, "tok_embeddings.weight"));
  for (int l = 0; l < s.L; ++l) {
    unit_weights(l + 1);
    prefetch_weights(l + 2);  // the next layer, or the head after the last one
    block_forward(l, acts_for(l), BlockPass::forward);
    offload_after_forward(l);  // its input to pinned host memory, under the next layer's compute
  }
  // The last block's forward has also taken the final norm: final_out_, final_rstd_ of residual_[L].
  const Tensor head_weights = unit_weights(head_unit);

  // The fused head computes the loss and, when asked, d(final_out) and the head's weight gradient.
  const char* head = s.tied ? "tok_embeddings.weight" : "lm_head.weight";
  const float grad_scale = global_count > 0 ? float(1.0 / global_count) : 0.f;
  if (want_grad) {
    if (zero_ <= 1) fill(full_grads_, 0.f);
    begin_unit_grads(0);  // zero 2/3: the embedding's slot lives through the whole backward (tied: the head too)
    begin_unit_grads(head_unit);
  }
  const Tensor head_w = s.tied ? unit_weights(0) : head_weights;
  const Tensor head_dw = want_grad ? (s.tied ? unit_grads(0) : unit_grads(head_unit)) : Tensor{};
  lm_head_loss(final_out_, param_view(head_w, head), targets_, losses_, head_scratch_,
               want_grad ? d_final_ : Tensor{}, want_grad ? param_view(head_dw, head) : Tensor{}, grad_scale);
  if (want_grad) backward();
  if (fp8_) fp8_->end_step();  // this step's FP8 factors into the guard's record
}

}  // namespace rt
