// precision fp8: a block's linear GEMMs with E4M3 operands (framework/model/fp8_linear.h says what is quantized, how,
// and over which ranks each amax is reduced). Each function is the FP8 twin of the bf16 GEMMs it replaces in
// model_forward.cpp / model_backward.cpp, with the same buffers in and out. Shapes: N = B*n tokens on this rank,
// m the MLP chunk's rows, C d_model, qd = Hl*D, kvd = Hkvl*D, Fl the local MLP width (Fm = 2Fl for SwiGLU's [w1; w3]).
// Fast accumulation (no f32 promotion) in the forward only, as TransformerEngine and torchao do, for tensorwise and
// block; rowwise's forward promotes to f32, because with fast accumulation its held-out loss ended 1.16% behind bf16's
// and with promotion 0.47% (bench/results/2026-12-03-h200-fp8.md, part 2; the goal is 0.5%). RT_FP8_FAST_ACCUM=0 / 1
// sets it for every recipe (an A/B of its effect; with 0 the GELU MLP runs gemm_fp8 + gelu_fwd: cuBLASLt's fused GELU
// always accumulates fast).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/model/fp8_linear.h"
#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {
namespace {
// RT_FP8_FAST_ACCUM: unset = the recipe's default (fast for tensorwise and block, f32 promotion for rowwise), 0 = f32
// promotion, 1 = fast, for every recipe. Read once; a value other than 0 or 1 is refused naming them.
bool forward_fast_accum(Fp8Recipe recipe) {
  static const int forced = [] {  // -1: the recipe's default
    const char* v = std::getenv("RT_FP8_FAST_ACCUM");
    if (v == nullptr) return -1;
    const std::string s = v;
    RT_CHECK(s == "0" || s == "1", "RT_FP8_FAST_ACCUM=" << s << " is not 0 (f32 promotion in the forward's FP8 "
                                   "GEMMs) or 1 (fast accumulation); unset, each recipe takes its default");
    std::fprintf(stderr, "fp8: RT_FP8_FAST_ACCUM=%s: the forward's FP8 GEMMs %s for every recipe\n", s.c_str(),
                 s == "0" ? "promote to f32" : "accumulate fast");
    return s == "1" ? 1 : 0;
  }();
  return forced >= 0 ? forced == 1 : recipe != Fp8Recipe::rowwise;
}
}  // namespace

bool Model::fp8_layer(int layer) const {
  if (!fp8_ || layer < 0) return false;  // layer -1: a decode step
  return !(options_.fp8_bf16_first_last && (layer == 0 || layer == int(shape_.L) - 1));
}

std::string Model::take_fp8_bad_factors(Comm& world) {
  return fp8_ ? fp8_->take_bad_factors(shape_.swiglu, world) : "";
}

namespace {
// Calls fn(chunk, r0, r1) for the attention side's token chunks [r0, r1) of N (fp8_linear.h: the scaling groups stay
// the whole tensors', taken by whole_amax first).
template <class Fn>
void for_attention_chunks(const Fp8Linear& f, int64_t N, Fn fn) {
  const int64_t m = f.attention_chunk();
  for (int64_t c = 0, r0 = 0; r0 < N; ++c, r0 += m) fn(c, r0, std::min(N, r0 + m));
}
}  // namespace

// q, k, v (N, qd | kvd) = ln1 (N, C) @ W^T, per chunk: a chunk of ln1 quantized once for the three.
void Model::fp8_qkv_forward(int layer, const LayerWeights& w, BlockActs& a) {
  Fp8Linear& f = *fp8_;
  const int64_t N = a.ln1.shape[0], C = a.ln1.shape[1];
  // Under checkpointing none also ln1^T, kept per chunk (C, m) for the weight gradients.
  const Fp8Linear::Whole ln1 = f.whole_amax(0, a.ln1, {f.tokens(), nullptr}, a.fp8_keep);
  const Fp8Split col_parallel{f.tp(), nullptr};
  const Fp8Operand& wq = f.weight(Fp8Linear::weight0, w.wq, col_parallel, false, layer, Fp8Site::wq);
  const Fp8Operand& wk = f.weight(Fp8Linear::weight_k, w.wk, col_parallel, false, layer, Fp8Site::wk);
  const Fp8Operand& wv = f.weight(Fp8Linear::weight_v, w.wv, col_parallel, false, layer, Fp8Site::wv);
  const bool fast = forward_fast_accum(f.recipe());
  for_attention_chunks(f, N, [&](int64_t c, int64_t r0, int64_t r1) {
    const Fp8Operand x = f.view_of(Fp8Linear::act, false, r1 - r0, C);  // (m, C)
    f.quantize_rows(ln1, a.ln1, r0, r1, x, a.fp8_keep ? a.ln1_t[size_t(c)] : Fp8Operand{});
    f.record(layer, Fp8Site::attn_norm_out, c, x);
    gemm_fp8(a.q.slice(r0, r1), x, wq, 0.f, fast);  // (m, qd)
    gemm_fp8(a.k.slice(r0, r1), x, wk, 0.f, fast);  // (m, kvd)
    gemm_fp8(a.v.slice(r0, r1), x, wv, 0.f, fast);  // (m, kvd)
  });
}

// x_mid (N, C) = att (N, qd) @ wo (C, qd)^T, partial over tp (the caller all-reduces), per chunk.
void Model::fp8_attn_out_forward(int layer, const LayerWeights& w, BlockActs& a) {
  Fp8Linear& f = *fp8_;
  const int64_t N = a.att.shape[0], qd = a.att.shape[1];
  // Under checkpointing none att is kept to the backward, which quantizes it again for wo's weight gradient: its amax
  // is remembered for that (whole_amax_remembered).
  const Fp8Split att_split{f.tokens(), f.tp()};
  const Fp8Linear::Whole att = a.fp8_keep ? f.whole_amax_remembered(0, layer, Fp8Site::attn_out, a.att, att_split, false,
                                                                    /*refresh=*/true)
                                          : f.whole_amax(0, a.att, att_split, false);
  const Fp8Operand& wo = f.weight(Fp8Linear::weight1, w.wo, {nullptr, f.tp()}, false, layer, Fp8Site::wo);
  for_attention_chunks(f, N, [&](int64_t c, int64_t r0, int64_t r1) {
    const Fp8Operand x = f.view_of(Fp8Linear::act, false, r1 - r0, qd);  // (m, qd)
    f.quantize_rows(att, a.att, r0, r1, x, Fp8Operand{});
    f.record(layer, Fp8Site::attn_out, c, x);
    gemm_fp8(a.x_mid.slice(r0, r1), x, wo, 0.f, forward_fast_accum(f.recipe()));  // (m, C)
  });
}

// h (m, Fm) = ln2 (m, C) @ fc (Fm, C)^T: the pre-activation; GELU: also g (m, Fl) = gelu(h) in the same cuBLASLt call,
// with g's amax for its quantization next (fp8_mlp_out_forward). SwiGLU: the caller applies it.
void Model::fp8_mlp_in_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& ln2, Tensor h,
                               Tensor g) {
  Fp8Linear& f = *fp8_;
  Fp8Operand x;  // (m, C); under checkpointing none also ln2^T (C, m), kept for the weight gradient
  const BlockActs& a = *acts_[size_t(layer)];
  if (a.fp8_keep) {
    x = f.view_of(Fp8Linear::act, false, ln2.shape[0], ln2.shape[1]);
    f.quantize_into(ln2, {f.tokens(), nullptr}, x, a.ln2_t[size_t(chunk)]);
  } else {
    f.quantize(ln2, {f.tokens(), nullptr}, false, Fp8Linear::act, -1, &x, nullptr);
  }
  f.record(layer, Fp8Site::mlp_norm_out, chunk, x);
  const Fp8Operand& fc = f.weight(Fp8Linear::weight0, w.fc_or_w13, {f.tp(), nullptr}, false, layer, Fp8Site::fc);
  const bool fast = forward_fast_accum(f.recipe());
  if (shape_.swiglu || !fast) {
    gemm_fp8(h, x, fc, 0.f, fast);
    if (!shape_.swiglu) gelu_fwd(g, h);
    return;
  }
  gemm_fp8_gelu(g, h, f.wants_given_amax() ? f.amax_slot() : Tensor{}, x, fc);  // h = x fc^T, g = gelu(h)
  if (f.wants_given_amax()) f.given_amax(g);
}

// out (m, C) = g (m, Fl) @ proj (C, Fl)^T, partial over tp.
void Model::fp8_mlp_out_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& g, Tensor out) {
  Fp8Linear& f = *fp8_;
  Fp8Operand x;  // (m, Fl); under checkpointing none also g^T (Fl, m), kept for the weight gradient
  const BlockActs& a = *acts_[size_t(layer)];
  if (a.fp8_keep) {
    x = f.view_of(Fp8Linear::act, false, g.shape[0], g.shape[1]);
    f.quantize_into(g, {f.tokens(), f.tp()}, x, a.g_t[size_t(chunk)]);
  } else {
    f.quantize(g, {f.tokens(), f.tp()}, false, Fp8Linear::act, -1, &x, nullptr);
  }
  f.record(layer, Fp8Site::mlp_act, chunk, x);
  gemm_fp8(out, x, f.weight(Fp8Linear::weight1, w.proj_or_w2, {nullptr, f.tp()}, false, layer, Fp8Site::proj), 0.f,
           forward_fast_accum(f.recipe()));
}

// The MLP's backward for one chunk: d_out (m, C) -> the output projection's weight gradient and d_g (m, Fl) ->
// through GELU / SwiGLU (h) -> d_h (m, Fm) -> the input projection's weight gradient and d_ln2 (m, C) (partial over
// tp). Weight gradients accumulate (beta 1, f32).
void Model::fp8_mlp_backward(int layer, int64_t chunk, const LayerWeights& w, const LayerWeights& dw,
                             const Tensor& ln2, const Tensor& h, const Tensor& g, const Tensor& d_out, Tensor d_ln2) {
  Fp8Linear& f = *fp8_;
  const int64_t m = d_out.shape[0];
  Fp8Operand dy, dy_t, x_t;  // (m, C), (C, m), (Fl, m)
  f.quantize(d_out, {f.tokens(), nullptr}, false, Fp8Linear::act, Fp8Linear::act_t, &dy, &dy_t);
  f.record(layer, Fp8Site::grad_mlp_out, chunk, dy);
  const BlockActs& a = *acts_[size_t(layer)];
  if (a.fp8_keep) x_t = a.g_t[size_t(chunk)];  // made by the forward
  else f.quantize(g, {f.tokens(), f.tp()}, false, -1, Fp8Linear::other_t, nullptr, &x_t);
  gemm_fp8(dw.proj_or_w2, dy_t, x_t, 1.f, false);  // (C, Fl) += d_out^T (C, m) . g^T (Fl, m)
  const Fp8Operand& proj_t = f.weight(Fp8Linear::weight1, w.proj_or_w2, {nullptr, f.tp()}, true, layer, Fp8Site::proj);
  const Tensor d_h = d_h_.slice(0, m);  // (m, Fm)
  if (shape_.swiglu) {
    const Tensor d_g = d_g_.slice(0, m);  // (m, Fl)
    gemm_fp8(d_g, dy, proj_t, 0.f, false);  // (m, Fl) = d_out (m, C) . w2^T (Fl, C)
    swiglu_bwd(d_h, d_g, h);                // (m, 2Fl) d gate | d up
  } else {  // (m, Fl) = (d_out . proj^T) * gelu'(h), one cuBLASLt call, with d_h's amax for its quantization next
    gemm_fp8_dgelu(d_h, f.wants_given_amax() ? f.amax_slot() : Tensor{}, dy, proj_t, h);
    if (f.wants_given_amax()) f.given_amax(d_h);
  }
  Fp8Operand dh, dh_t, ln2_t;  // (m, Fm), (Fm, m), (C, m)
  f.quantize(d_h, {f.tokens(), f.tp()}, false, Fp8Linear::act, Fp8Linear::act_t, &dh, &dh_t);
  f.record(layer, Fp8Site::grad_mlp_hidden, chunk, dh);
  if (a.fp8_keep) ln2_t = a.ln2_t[size_t(chunk)];  // made by the forward
  else f.quantize(ln2, {f.tokens(), nullptr}, false, -1, Fp8Linear::other_t, nullptr, &ln2_t);
  const Fp8Operand& fc_t = f.weight(Fp8Linear::weight0, w.fc_or_w13, {f.tp(), nullptr}, true, layer, Fp8Site::fc);
  gemm_fp8(d_ln2, dh, fc_t, 0.f, false);         // (m, C) = d_h (m, Fm) . fc^T (C, Fm)
  gemm_fp8(dw.fc_or_w13, dh_t, ln2_t, 1.f, false);  // (Fm, C) += d_h^T (Fm, m) . ln2^T (C, m)
}

// d_res (N, C) -> wo's weight gradient and d_att (N, qd), per chunk.
void Model::fp8_attn_out_backward(int layer, const LayerWeights& w, const LayerWeights& dw, BlockActs& a) {
  Fp8Linear& f = *fp8_;
  const int64_t N = d_res_.shape[0], C = d_res_.shape[1], qd = a.att.shape[1];
  const Fp8Linear::Whole d_res = f.whole_amax(0, d_res_, {f.tokens(), nullptr}, true);
  const Fp8Split att_split{f.tokens(), f.tp()};
  const Fp8Linear::Whole att = a.fp8_keep ? f.whole_amax_remembered(1, layer, Fp8Site::attn_out, a.att, att_split, true,
                                                                    /*refresh=*/false)
                                          : f.whole_amax(1, a.att, att_split, true);
  const Fp8Operand& wo_t = f.weight(Fp8Linear::weight1, w.wo, {nullptr, f.tp()}, true, layer, Fp8Site::wo);
  for_attention_chunks(f, N, [&](int64_t c, int64_t r0, int64_t r1) {
    const int64_t m = r1 - r0;
    const Fp8Operand dy = f.view_of(Fp8Linear::act, false, m, C), dy_t = f.view_of(Fp8Linear::act_t, false, C, m);
    const Fp8Operand x_t = f.view_of(Fp8Linear::other_t, false, qd, m);  // (m, C), (C, m), (qd, m)
    f.quantize_rows(d_res, d_res_, r0, r1, dy, dy_t);
    f.record(layer, Fp8Site::grad_attn_proj_out, c, dy);
    f.quantize_rows(att, a.att, r0, r1, Fp8Operand{}, x_t);
    gemm_fp8(dw.wo, dy_t, x_t, 1.f, false);                  // (C, qd) += d_res^T (C, m) . att^T (qd, m)
    gemm_fp8(d_att_.slice(r0, r1), dy, wo_t, 0.f, false);   // (m, qd) = d_res (m, C) . wo^T (qd, C)
  });
}

// d_q, d_k, d_v (after RoPE's backward) -> the weight gradients of wq, wk, wv and d_ln (N, C) (partial over tp), per
// chunk: ln1^T's chunk (kept under checkpointing none) serves the three weight gradients.
void Model::fp8_qkv_backward(int layer, const LayerWeights& w, const LayerWeights& dw, BlockActs& a) {
  Fp8Linear& f = *fp8_;
  const int64_t N = a.ln1.shape[0], C = a.ln1.shape[1];
  struct Part {
    const Tensor& dy;  // (N, qd | kvd)
    const Tensor& wt;  // (qd | kvd, C)
    const Tensor& dwt;
    Fp8Site grad, site;
    int buffer;
  };
  const Part parts[3] = {{d_q_, w.wq, dw.wq, Fp8Site::grad_q, Fp8Site::wq, Fp8Linear::weight0},
                         {d_k_, w.wk, dw.wk, Fp8Site::grad_k, Fp8Site::wk, Fp8Linear::weight_k},
                         {d_v_, w.wv, dw.wv, Fp8Site::grad_v, Fp8Site::wv, Fp8Linear::weight_v}};
  Fp8Linear::Whole ln1, dys[3];
  if (!a.fp8_keep) ln1 = f.whole_amax(0, a.ln1, {f.tokens(), nullptr}, true);
  const Fp8Operand* w_t[3];
  for (int i = 0; i < 3; ++i) {
    dys[i] = f.whole_amax(1 + i, parts[i].dy, {f.tokens(), f.tp()}, true);
    w_t[i] = &f.weight(parts[i].buffer, parts[i].wt, {f.tp(), nullptr}, true, layer, parts[i].site);
  }
  for_attention_chunks(f, N, [&](int64_t c, int64_t r0, int64_t r1) {
    const int64_t m = r1 - r0;
    Fp8Operand x_t;  // (C, m)
    if (a.fp8_keep) {
      x_t = a.ln1_t[size_t(c)];  // made by the forward
    } else {
      x_t = f.view_of(Fp8Linear::other_t, false, C, m);
      f.quantize_rows(ln1, a.ln1, r0, r1, Fp8Operand{}, x_t);
    }
    for (int i = 0; i < 3; ++i) {
      const Part& p = parts[i];
      const int64_t rows = p.dy.shape[1];
      const Fp8Operand dy = f.view_of(Fp8Linear::act, false, m, rows);       // (m, rows)
      const Fp8Operand dy_t = f.view_of(Fp8Linear::act_t, false, rows, m);   // (rows, m)
      f.quantize_rows(dys[i], p.dy, r0, r1, dy, dy_t);
      f.record(layer, p.grad, c, dy);
      gemm_fp8(p.dwt, dy_t, x_t, 1.f, false);  // (rows, C) += dy^T (rows, m) . ln1^T (C, m)
      gemm_fp8(d_ln_.slice(r0, r1), dy, *w_t[i], i == 0 ? 0.f : 1.f, false);  // (m, C) (+)= dy (m, rows) . W^T
    }
  });
}

}  // namespace rt
