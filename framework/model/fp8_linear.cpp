// FP8 linear layers: workspaces, quantization with the amax reductions, the tiling check and the guard's record
// (framework/model/fp8_linear.h).
#include "framework/model/fp8_linear.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/ops.h"

namespace rt {

const char* fp8_site_name(Fp8Site site, bool swiglu) {
  switch (site) {
    case Fp8Site::attn_norm_out: return "attention norm output (input of attn.wq, wk, wv)";
    case Fp8Site::wq: return "attn.wq.weight";
    case Fp8Site::wk: return "attn.wk.weight";
    case Fp8Site::wv: return "attn.wv.weight";
    case Fp8Site::attn_out: return "attention output (input of attn.wo)";
    case Fp8Site::wo: return "attn.wo.weight";
    case Fp8Site::mlp_norm_out: return swiglu ? "MLP norm output (input of mlp.w1, w3)" : "MLP norm output (input of mlp.fc)";
    case Fp8Site::fc: return swiglu ? "mlp.w1.weight / mlp.w3.weight" : "mlp.fc.weight";
    case Fp8Site::mlp_act: return swiglu ? "MLP activation (input of mlp.w2)" : "MLP activation (input of mlp.proj)";
    case Fp8Site::proj: return swiglu ? "mlp.w2.weight" : "mlp.proj.weight";
    case Fp8Site::grad_attn_proj_out: return "gradient of attn.wo's output";
    case Fp8Site::grad_q: return "gradient of q";
    case Fp8Site::grad_k: return "gradient of k";
    case Fp8Site::grad_v: return "gradient of v";
    case Fp8Site::grad_mlp_out: return swiglu ? "gradient of mlp.w2's output" : "gradient of mlp.proj's output";
    case Fp8Site::grad_mlp_hidden: return swiglu ? "gradient of the MLP gate|up" : "gradient of mlp.fc's output";
    case Fp8Site::count: break;
  }
  return "?";
}

Fp8Recipe parse_fp8_recipe(const std::string& name) {
  if (name == "tensorwise") return Fp8Recipe::tensorwise;
  if (name == "rowwise") return Fp8Recipe::rowwise;
  RT_CHECK(name == "block", "fp8.recipe='" << name << "' must be tensorwise, rowwise or block");
  return Fp8Recipe::block;
}

std::string fp8_tiling_problem(Fp8Recipe recipe, const Fp8BlockDims& d, int first_fp8_layer) {
  const Fp8Scaling a = fp8_scaling_for(recipe, false), w = fp8_scaling_for(recipe, true);
  const int64_t N = d.tokens, C = d.d_model, Fm = d.swiglu ? 2 * d.mlp_width : d.mlp_width;
  auto chunk_rows = [N](int64_t m) {  // the rows of a full chunk and of the last, shorter one
    std::vector<int64_t> rows = {std::min(m, N)};
    if (N % rows[0] != 0) rows.push_back(N % rows[0]);
    return rows;
  };
  const std::vector<int64_t> chunks = chunk_rows(d.mlp_chunk);
  const std::vector<int64_t> attention_chunks = chunk_rows(d.attention_chunk > 0 ? d.attention_chunk : d.mlp_chunk);
  struct Gemm {
    std::string what;
    Fp8Scaling sa, sb;
    int64_t M, Nn, K;
  };
  const std::string layer = "layer " + std::to_string(first_fp8_layer) + " ";
  std::vector<Gemm> gemms;
  auto linear = [&](const std::string& name, int64_t tokens, int64_t out, int64_t in) {
    gemms.push_back({layer + name + " forward GEMM (tokens x " + std::to_string(in) + " -> " + std::to_string(out) + ")",
                     a, w, tokens, out, in});
    gemms.push_back({layer + name + " data-gradient GEMM", a, w, tokens, in, out});
    gemms.push_back({layer + name + " weight-gradient GEMM (K = tokens per rank" +
                         std::string(tokens == N ? ")" : " in one token chunk)"),
                     a, a, out, in, tokens});
  };
  for (int64_t a : attention_chunks) {
    linear("attn.wq", a, d.q_width, C);
    linear("attn.wk", a, d.kv_width, C);
    linear("attn.wv", a, d.kv_width, C);
    linear("attn.wo", a, C, d.q_width);
  }
  for (int64_t m : chunks) {
    linear(d.swiglu ? "mlp.w1|w3" : "mlp.fc", m, Fm, C);
    linear(d.swiglu ? "mlp.w2" : "mlp.proj", m, C, d.mlp_width);
  }
  for (const Gemm& g : gemms) {
    try {
      check_fp8_gemm_tiling(g.sa, g.sb, g.M, g.Nn, g.K, g.what.c_str());
    } catch (const Error& e) {
      return std::string("train.precision=fp8 with fp8.recipe=") + fp8_recipe_name(recipe) + ": " + e.what();
    }
  }
  return "";
}

Fp8Linear::Fp8Linear(Fp8Recipe recipe, const Fp8BlockDims& d, int layers, Comm& tp, Comm& dp_cp, Arena& arena)
    : recipe_(recipe), tp_(&tp), dp_cp_(&dp_cp), layers_(layers) {
  const int64_t N = d.tokens, m = std::min(d.mlp_chunk, N), C = d.d_model, qd = d.q_width, kvd = d.kv_width;
  const int64_t Fl = d.mlp_width, Fm = d.swiglu ? 2 * Fl : Fl;
  const int64_t a = std::min(d.attention_chunk > 0 ? d.attention_chunk : m, N);  // attention-side chunk rows
  attention_chunk_ = a;
  chunks_ = (N + std::min(a, m) - 1) / std::min(a, m);
  // Every (R, K) each buffer is viewed as (fp8_linear.h: the GEMMs of model_forward.cpp / model_backward.cpp).
  struct Use {
    int buffer;
    bool weight;
    int64_t R, K;
  };
  const std::vector<Use> uses = {
      {act, false, a, C},      {act, false, a, qd},      {act, false, a, kvd},     {act, false, m, C},
      {act, false, m, Fl},     {act, false, m, Fm},      {act_t, false, C, a},     {act_t, false, qd, a},
      {act_t, false, kvd, a},  {act_t, false, C, m},     {act_t, false, Fm, m},    {other_t, false, C, a},
      {other_t, false, qd, a}, {other_t, false, Fl, m},  {other_t, false, C, m},   {weight0, true, qd, C},
      {weight0, true, Fm, C},  {weight0, true, C, qd},   {weight0, true, C, Fm},   {weight1, true, C, qd},
      {weight1, true, qd, C},  {weight1, true, C, Fl},   {weight1, true, Fl, C},   {weight_k, true, kvd, C},
      {weight_k, true, C, kvd}, {weight_v, true, kvd, C}, {weight_v, true, C, kvd}};
  int64_t elems[kBuffers] = {}, factors[kBuffers] = {}, dim = 1;
  for (const Use& u : uses) {
    elems[u.buffer] = std::max(elems[u.buffer], u.R * u.K);
    factors[u.buffer] =
        std::max(factors[u.buffer], fp8_scale_shape(fp8_scaling_for(recipe, u.weight), u.R, u.K).numel());
    dim = std::max({dim, u.R, u.K});
  }
  const char* names[kBuffers] = {"fp8: activation / gradient operand", "fp8: transposed gradient operand",
                                 "fp8: transposed activation operand", "fp8: weight operand (QKV, MLP in)",
                                 "fp8: weight operand (output projections)", "fp8: weight operand (wk)",
                                 "fp8: weight operand (wv)"};
  for (int b = 0; b < kBuffers; ++b) {
    data_[b] = arena.alloc(DType::e4m3, {elems[b]}, names[b]);         // (largest R*K of the buffer) e4m3
    scale_[b] = arena.alloc(DType::f32, {factors[b]}, "fp8: factors");  // (largest scale tensor) f32
  }
  amax_rows_ = arena.alloc(DType::f32, {dim}, "fp8: amaxes");  // (max dim) f32
  amax_cols_ = arena.alloc(DType::f32, {dim}, "fp8: amaxes");  // (max dim) f32
  given_amax_ = arena.alloc(DType::f32, {1}, "fp8: a producer's amax");  // (1) f32
  for (Tensor& w : whole_) w = arena.alloc(DType::f32, {dim}, "fp8: whole-tensor amaxes");  // (max dim) f32
  const int64_t sites = int64_t(layers) * int64_t(Fp8Site::count);
  remembered_ = arena.alloc(DType::f32, {sites}, "fp8: remembered amaxes");  // (layers * sites) f32
  remembered_meta_.assign(size_t(sites), Remembered{});
  const int64_t group = std::max(tp.size(), dp_cp.size());
  if (group > 1) gathered_ = arena.alloc(DType::f32, {group * dim}, "fp8: gathered amaxes");  // (group*dim) f32
  const int64_t entries = int64_t(layers) * int64_t(Fp8Site::count) * chunks_;
  health_ = arena.alloc(DType::f32, {3, entries}, "fp8: factor record");  // (3, layers*sites*chunks) f32
}

Fp8Operand Fp8Linear::view(int buffer, Fp8Scaling scaling, int64_t R, int64_t K) const {
  Fp8Operand o;
  o.scaling = scaling;
  RT_CHECK(R * K <= data_[buffer].numel(), "fp8: a (" << R << "," << K << ") operand exceeds workspace " << buffer
                                                       << " (" << data_[buffer].numel() << " elements)");
  o.data = data_[buffer].slice(0, R * K).view({R, K});  // (R,K) e4m3
  const Fp8ScaleShape s = fp8_scale_shape(scaling, R, K);
  RT_CHECK(s.numel() <= scale_[buffer].numel(), "fp8: the factors of a (" << R << "," << K << ") operand exceed "
                                                                          << "workspace " << buffer);
  const Tensor f = scale_[buffer].slice(0, s.numel());
  o.scale = s.ndim == 1 ? f.view({s.d0}) : f.view({s.d0, s.d1});  // fp8_scale_shape f32
  return o;
}

void Fp8Linear::reduce_max(Tensor v, Comm* comm) {
  if (!comm || comm->size() == 1) return;
  const int64_t p = comm->size(), k = v.numel();
  const Tensor all = gathered_.slice(0, p * k);  // (p*k) f32
  comm->wait(comm->all_gather_start(v, all));
  fp8_amax(Tensor{}, v, all.view({p, k}), Fp8Scaling::row);  // v (k) = max over the p rows, NaN propagating
}

void Fp8Linear::quantize(const Tensor& x, Fp8Split split, bool is_weight, int q_buf, int t_buf, Fp8Operand* q,
                         Fp8Operand* qt) {
  RT_CHECK(x.ndim == 2, "fp8: quantize takes a (R,K) tensor, got " << x.shape_str());
  const int64_t R = x.shape[0], K = x.shape[1];
  const Fp8Scaling sc = fp8_scaling_for(recipe_, is_weight);
  Fp8Operand oq, ot;
  if (q_buf >= 0) oq = view(q_buf, sc, R, K);
  if (t_buf >= 0) ot = view(t_buf, sc, K, R);
  quantize_into(x, split, oq, ot);
  if (q) *q = oq;
  if (qt) *qt = ot;
}

Fp8Operand Fp8Linear::alloc_operand(Arena& arena, bool is_weight, int64_t R, int64_t K, const char* what) const {
  Fp8Operand o;
  o.scaling = fp8_scaling_for(recipe_, is_weight);
  o.data = arena.alloc(DType::e4m3, {R, K}, what);  // (R,K) e4m3
  const Fp8ScaleShape s = fp8_scale_shape(o.scaling, R, K);
  o.scale = s.ndim == 1 ? arena.alloc(DType::f32, {s.d0}, what)           // fp8_scale_shape f32
                        : arena.alloc(DType::f32, {s.d0, s.d1}, what);
  return o;
}

void Fp8Linear::quantize_into(const Tensor& x, Fp8Split split, const Fp8Operand& oq, const Fp8Operand& ot) {
  RT_CHECK(x.ndim == 2, "fp8: quantize takes a (R,K) tensor, got " << x.shape_str());
  const int64_t R = x.shape[0], K = x.shape[1];
  const Fp8Scaling sc = oq.defined() ? oq.scaling : ot.scaling;
  RT_CHECK(!(oq.defined() && ot.defined()) || oq.scaling == ot.scaling, "fp8: q and qt scaled differently");
  Tensor amax, amax_t;
  if (sc == Fp8Scaling::tensor) {
    amax = tensor_amax(x, split, amax_rows_.slice(0, 1));  // (1)
  } else if (sc == Fp8Scaling::row) {
    if (oq.defined()) amax = amax_rows_.slice(0, R);    // (R): a row of q spans x's columns
    if (ot.defined()) amax_t = amax_cols_.slice(0, K);  // (K): a row of qt spans x's rows
    fp8_amax(amax, amax_t, x, sc);
    if (amax.defined()) reduce_max(amax, split.cols);
    if (amax_t.defined()) reduce_max(amax_t, split.rows);
  }
  fp8_quantize(oq, ot, x, amax, amax_t);
}

Tensor Fp8Linear::tensor_amax(const Tensor& x, Fp8Split split, Tensor scratch) {
  const bool given = given_for_ != nullptr && given_for_ == x.data && given_numel_ == x.numel();
  const Tensor amax = given ? given_amax_ : scratch;  // (1)
  if (given) given_for_ = nullptr;                   // used once
  else fp8_amax(amax, Tensor{}, x, Fp8Scaling::tensor);
  reduce_max(amax, split.rows);
  reduce_max(amax, split.cols);
  return amax;
}

Fp8Linear::Whole Fp8Linear::whole_amax(int slot, const Tensor& x, Fp8Split split, bool transposed) {
  RT_CHECK(x.ndim == 2 && slot >= 0 && slot < kWholeSlots, "fp8: whole_amax takes a (R,K) tensor and a slot < "
                                                               << kWholeSlots << ", got " << x.shape_str());
  Whole w;
  w.split = split, w.transposed = transposed;
  const Fp8Scaling sc = fp8_scaling_for(recipe_, false);
  if (sc == Fp8Scaling::tensor) {
    w.amax = whole_[slot].slice(0, 1);  // (1), held in the slot (a given amax is copied there)
    const Tensor amax = tensor_amax(x, split, w.amax);
    if (amax.data != w.amax.data) copy_cast(w.amax, amax);
  } else if (sc == Fp8Scaling::row && transposed) {
    w.amax = whole_[slot].slice(0, x.shape[1]);  // (K): a row of qt spans all of x's rows
    fp8_amax(Tensor{}, w.amax, x, sc);
    reduce_max(w.amax, split.rows);
  }
  return w;
}

Fp8Linear::Whole Fp8Linear::whole_amax_remembered(int slot, int layer, Fp8Site site, const Tensor& x, Fp8Split split,
                                                  bool transposed, bool refresh) {
  if (recipe_ != Fp8Recipe::tensorwise) return whole_amax(slot, x, split, transposed);
  Whole w;
  w.split = split, w.transposed = transposed;
  w.amax = remembered_amax(layer, site, x, split, refresh);  // (1)
  return w;
}

Tensor Fp8Linear::remembered_amax(int layer, Fp8Site site, const Tensor& x, Fp8Split split, bool refresh) {
  RT_CHECK(layer >= 0 && layer < layers_ && site < Fp8Site::count,
           "fp8: remembered_amax for layer " << layer << " of " << layers_);
  const int64_t i = int64_t(layer) * int64_t(Fp8Site::count) + int64_t(site);
  Remembered& r = remembered_meta_[size_t(i)];
  const Tensor slot = remembered_.slice(i, i + 1);  // (1) f32
  if (!refresh && r.epoch == epoch_ && r.data == x.data && r.numel == x.numel()) return slot;
  const Tensor amax = tensor_amax(x, split, slot);  // the given one, or taken into the slot
  if (amax.data != slot.data) copy_cast(slot, amax);
  r = {epoch_, x.data, x.numel()};
  return slot;
}

void Fp8Linear::quantize_rows(const Whole& w, const Tensor& x, int64_t r0, int64_t r1, const Fp8Operand& oq,
                              const Fp8Operand& ot) {
  RT_CHECK(!ot.defined() || w.transposed, "fp8: quantize_rows: qt wanted but whole_amax was taken without it");
  const Tensor rows = x.slice(r0, r1);  // (r1-r0, K)
  const Fp8Scaling sc = oq.defined() ? oq.scaling : ot.scaling;
  Tensor amax = w.amax, amax_t;
  if (sc == Fp8Scaling::row) {
    amax_t = ot.defined() ? w.amax : Tensor{};  // (K) over all rows
    amax = Tensor{};
    if (oq.defined()) {  // (r1-r0): per token, the chunk's own
      amax = amax_rows_.slice(0, r1 - r0);
      fp8_amax(amax, Tensor{}, rows, sc);
      reduce_max(amax, w.split.cols);
    }
  }
  fp8_quantize(oq, ot, rows, amax, amax_t);
}

const Fp8Operand& Fp8Linear::weight(int buffer, const Tensor& w, Fp8Split split, bool transposed, int layer,
                                    Fp8Site which) {
  Held& h = held_[buffer];
  if (h.epoch == epoch_ && h.layer == layer && h.which == which && h.transposed == transposed) return h.op;
  Fp8Operand o;
  if (recipe_ == Fp8Recipe::tensorwise) {  // one amax pass a step: W's in the forward, reused for W^T
    const int64_t R = w.shape[0], K = w.shape[1];
    o = transposed ? view(buffer, Fp8Scaling::tensor, K, R) : view(buffer, Fp8Scaling::tensor, R, K);
    const Tensor amax = remembered_amax(layer, which, w, split, /*refresh=*/false);  // (1)
    fp8_quantize(transposed ? Fp8Operand{} : o, transposed ? o : Fp8Operand{}, w, amax, Tensor{});
  } else if (transposed) {
    quantize(w, split, /*is_weight=*/true, -1, buffer, nullptr, &o);
  } else {
    quantize(w, split, /*is_weight=*/true, buffer, -1, &o, nullptr);
  }
  h = {epoch_, layer, which, transposed, o};
  if (!transposed) record(layer, which, 0, h.op);
  return h.op;
}

void Fp8Linear::record(int layer, Fp8Site site, int64_t chunk, const Fp8Operand& o) {
  const int64_t n = health_.shape[1];
  if (!health_ready_) {
    fill(health_, 0.f);
    health_ready_ = true;
  }
  const int64_t i = (int64_t(layer) * int64_t(Fp8Site::count) + int64_t(site)) * chunks_ + std::min(chunk, chunks_ - 1);
  const Tensor entry = health_.slice(0, 1).view({n}).slice(i, i + 1);  // (1) f32
  const Tensor f = o.scale.ndim == 1 ? o.scale.view({1, o.scale.shape[0]}) : o.scale;
  fp8_amax(entry, Tensor{}, f, Fp8Scaling::tensor);  // max |factor|: inf or NaN for a bad amax
}

void Fp8Linear::end_step() {
  if (!health_ready_) return;
  const int64_t n = health_.shape[1];
  const Tensor fold = health_.slice(2, 3).view({n});                   // (n) f32
  fp8_amax(Tensor{}, fold, health_.slice(0, 2), Fp8Scaling::row);        // max of this step's and the running record
  copy_cast(health_.slice(1, 2).view({n}), fold);
}

std::string Fp8Linear::take_bad_factors(bool swiglu, Comm& world, int limit) {
  const int64_t n = int64_t(layers_) * int64_t(Fp8Site::count) * chunks_;
  std::vector<float> h(size_t(n), 0.f);  // (layers, sites, chunks)
  if (health_ready_) {
    copy_cast(Tensor(h.data(), DType::f32, Device::cpu(), {n}), health_.slice(1, 2).view({n}));
    fill(health_.slice(0, 2), 0.f);
  }
  // Per entry: ranks that saw a NaN factor, then ranks that saw an infinite one (summed over the world).
  std::vector<double> seen(size_t(2 * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(h[size_t(i)])) seen[size_t(i)] = 1;
    else if (std::isinf(h[size_t(i)])) seen[size_t(n + i)] = 1;
  }
  world.all_reduce_sum(seen.data(), int(seen.size()));
  // The bad entries in the order the step quantized them (Fp8Site): the forward by layer, then the backward from
  // the last layer down.
  const int64_t S = int64_t(Fp8Site::count), first_grad = int64_t(Fp8Site::grad_mlp_out);
  auto step_order = [&](int64_t i) {
    const int64_t site = (i / chunks_) % S, layer = i / chunks_ / S, chunk = i % chunks_;
    const int64_t pass = site < first_grad ? layer : 2 * int64_t(layers_) - 1 - layer;
    return (pass * S + site) * chunks_ + chunk;
  };
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (seen[size_t(i)] > 0 || seen[size_t(n + i)] > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return step_order(a) < step_order(b); });
  std::string out;
  int shown = 0, bad = 0;
  for (const int64_t i : order) {
    const double nan_ranks = seen[size_t(i)], inf_ranks = seen[size_t(n + i)];
    ++bad;
    if (shown >= limit) continue;
    ++shown;
    const int64_t chunk = i % chunks_, site = (i / chunks_) % int64_t(Fp8Site::count);
    const int64_t layer = i / chunks_ / int64_t(Fp8Site::count);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%slayer %lld %s%s: FP8 factor %s on %.0f rank(s)", out.empty() ? "" : "; ",
                  (long long)layer, fp8_site_name(Fp8Site(site), swiglu),
                  chunks_ > 1 ? (" (token chunk " + std::to_string(chunk) + ")").c_str() : "",
                  nan_ranks > 0 ? "NaN (a NaN in the tensor)" : "inf (its amax overflowed)",
                  nan_ranks > 0 ? nan_ranks : inf_ranks);
    out += buf;
  }
  if (bad > shown) out += "; and " + std::to_string(bad - shown) + " more";
  return out;
}

}  // namespace rt
