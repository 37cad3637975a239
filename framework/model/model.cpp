// Model construction: every buffer the model needs, allocated once from the arena, with its shape.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "framework/base/run_errors.h"
#include "framework/model/fp8_linear.h"
#include "framework/model/model_internal.h"
#include "framework/model/rope_table_threaded.h"
#include "framework/config/rope_scaling.h"
#include "kernels/ops.h"
#include "kernels/rope_table.h"

namespace rt {

Model::Model(const ModelConfig& config, const ModelOptions& options, int64_t batch, int64_t local_tokens,
             const ModelComms& comms, Arena& arena)
    : config_(config), rope_freqs_(rope_frequencies(config)), options_(options), comms_(comms) {
  RT_CHECK(comms.tp && comms.cp && comms.dp_cp, "model: tp, cp and dp_cp communicators are required");
  shape_ = make_model_shape(config, comms.tp->size(), comms.tp_rank, batch, local_tokens);
  RT_CHECK(options.zero >= 0 && options.zero <= 3, "parallel.zero: " << options.zero << " must be 0, 1, 2 or 3");
  // A dp x cp group of one holds nothing another rank could share: run stage 0 (the trainer says so).
  zero_ = comms.dp_cp->size() > 1 ? options.zero : 0;
  shards_ = zero_ > 0 ? comms.dp_cp->size() : 1;
  shard_rank_ = zero_ > 0 ? comms.dp_cp->rank() : 0;
  layout_ = build_param_layout(config, comms.tp->size(), comms.tp_rank, shards_);
  params_ = layout_.table;
  const ModelShape& s = shape_;
  RT_CHECK(s.B > 0 && s.n > 0, "model: empty batch (" << s.B << " sequences of " << s.n << " tokens per rank)");
  const DType act = options.act_dtype;
  const int64_t N = s.N(), C = s.C, qd = s.Hl * s.D, kvd = s.Hkvl * s.D, Fl = s.Fl;

  const int64_t P = layout_.total, local = P / shards_;
  build_local_runs();
  // A forward-only model at zero 0 with a narrower compute dtype (generate, eval on a GPU) keeps its weights in the
  // compute copy alone: no f32 master (4 bytes a parameter); weights() is where they are loaded and read.
  const bool compute_only = options.forward_only && zero_ == 0 && act != DType::f32;
  if (!compute_only)
    master_ = arena.alloc(DType::f32, {local},  // (local) f32
                          zero_ > 0 ? "parameters (f32 master shard)" : "parameters (f32 master)");
  // forward_only (eval, generate): no backward ever runs, so no gradient buffer (4 bytes a parameter).
  if (!options.forward_only) {
    if (zero_ <= 1) full_grads_ = arena.alloc(DType::f32, {P}, "gradients (f32)");  // (P)
    grads_ = zero_ == 0 ? full_grads_ : arena.alloc(DType::f32, {local}, "gradients (f32 shard)");  // (local)
  }
  if (zero_ == 3) compute_ = arena.alloc(act, {local}, "parameters (compute shard)");  // (local)
  else if (act == DType::f32 && zero_ == 0) compute_ = master_;                        // (P)
  else compute_ = arena.alloc(act, {P}, "parameters (compute copy)");                  // (P)
  // Slots for the units in flight: [0] embedding, [1] head, [2, 3] layers by parity, each sized for the largest
  // unit it serves. Gradients (zero 2/3) are reduce-scattered out of them; weights (zero 3) gathered into them.
  if (zero_ >= 2) {
    int64_t slot_numel[4] = {0, 0, 0, 0};
    for (int u = 0; u < int(layout_.units.size()); ++u)
      slot_numel[slot_of(u)] = std::max(slot_numel[slot_of(u)], layout_.units[size_t(u)].numel);
    const char* grad_names[4] = {"zero: embedding gradient slot (f32)", "zero: head gradient slot (f32)",
                                 "zero: layer gradient slots (f32)", "zero: layer gradient slots (f32)"};
    const char* weight_names[4] = {"zero 3: embedding gather slot", "zero 3: head gather slot",
                                   "zero 3: layer gather slots", "zero 3: layer gather slots"};
    for (int k = 0; k < 4; ++k) {
      if (slot_numel[k] == 0) continue;
      if (!options.forward_only)
        grad_slot_[k] = arena.alloc(DType::f32, {slot_numel[k]}, grad_names[k]);  // (unit numel) f32
      if (zero_ == 3) weight_slot_[k] = arena.alloc(act, {slot_numel[k]}, weight_names[k]);  // (unit numel) act
    }
  }

  tokens_ = arena.alloc(DType::i32, {N}, "tokens");        // (N)
  targets_ = arena.alloc(DType::i32, {N}, "targets");      // (N)
  // The RoPE table: one row per position of this rank's tokens. With positions shared by the samples
  // (data.positions: global, fixed layouts) the B samples read the same n rows; with per-sample positions
  // (data.positions: document, or the balanced layout) each sample has its own n rows.
  RT_CHECK(options.per_sample_positions || options.layout != Layout::balanced,
           "model: parallel.layout=balanced lays out each sample by its own documents, so the samples of a batch "
           "have different RoPE positions; build the model with ModelOptions::per_sample_positions (model_options() "
           "sets it for balanced)");
  rope_table_rows_ = options.per_sample_positions ? s.B * s.n : s.n;
  rope_table_ = arena.alloc(DType::f32, {rope_table_rows_, s.D / 2, 2},
                            "rope table (cos, sin per position)");  // (n or B*n, D/2, 2)
  losses_ = arena.alloc(DType::f32, {N}, "per-token losses");  // (N)
  if (options.documents && arena.device().is_cuda())
    doc_mask_dev_ = arena.alloc(DType::i32, {2, s.B, s.n * comms.cp->size(), 2},
                                "document mask (int64 positions, document starts)");  // (2, B, cp*n, 2) i32

  offload_layers_ = options.offload_layers;
  RT_CHECK(offload_layers_ >= 0 && offload_layers_ <= s.L,
           "train.offload_layers=" << offload_layers_ << " must be between 0 and model.n_layer=" << s.L);
  RT_CHECK(offload_layers_ == 0 || arena.device().is_cuda(),
           "train.offload=activations is for GPU runs (block inputs to pinned host memory); on the CPU use "
           "train.offload: none");
  for (int k = 0; k < 2 && k < offload_layers_; ++k)
    offload_stage_[k] = arena.alloc(act, {N, C}, "offload: block input staging (x2)");  // (N, C)
  // (N, C) each. forward_only: block l reads residual_[l] and writes residual_[l + 1], so two buffers alternate.
  for (int64_t l = 0; l <= s.L; ++l) {
    if (l < offload_layers_) residual_.push_back(offload_stage_[l % 2]);
    else if (options.forward_only && l >= 2) residual_.push_back(residual_[size_t(l - 2)]);
    else residual_.push_back(arena.alloc(act, {N, C}, "residual stream (block inputs)"));
  }
  host_offload_bytes_ = size_t(offload_layers_) * size_t(N) * size_t(C) * dtype_size(act);
  if (offload_layers_ > 0 && !arena.is_measuring()) init_offload();
  // Which buffers each layer keeps: all (none), attention output + LSE (selective), nothing (full). The
  // buffers a layer does not keep are one shared set, recomputed in the backward.
  const ActivationCheckpointing ckpt = options.checkpointing;
  const bool keep_all = ckpt == ActivationCheckpointing::none && !options.forward_only;
  const bool keep_attention = ckpt != ActivationCheckpointing::full && !options.forward_only;
  keep_mlp_hidden_ = keep_all;
  mlp_chunk_ = resolve_mlp_chunk(options.mlp_chunk, N, Fl, options.fp8, ckpt);
  if (options.fp8) {  // precision fp8: the GEMMs must tile; the shared FP8 workspaces (framework/model/fp8_linear.h)
    // RT_FP8_ATTENTION_CHUNKS=0: the attention side's FP8 GEMMs over all N tokens at once (fp8_linear.h; an A/B).
    const char* chunks_env = std::getenv("RT_FP8_ATTENTION_CHUNKS");
    const std::string attention_chunks = chunks_env ? chunks_env : "1";
    RT_CHECK(attention_chunks == "0" || attention_chunks == "1",
             "RT_FP8_ATTENTION_CHUNKS=" << attention_chunks << " is not 0 (the attention side's FP8 GEMMs over all "
                                        "tokens at once) or 1 (in MLP-chunk token chunks, the default)");
    const Fp8BlockDims dims{N, mlp_chunk_, C, qd, kvd, Fl, s.swiglu, attention_chunks == "0" ? N : mlp_chunk_};
    const std::string problem = fp8_tiling_problem(options.fp8_recipe, dims, options.fp8_bf16_first_last ? 1 : 0);
    if (!problem.empty()) throw RunError(kExitUsage, problem);
    fp8_ = std::make_unique<Fp8Linear>(options.fp8_recipe, dims, int(s.L), *comms.tp, *comms.dp_cp, arena);
  }
  // fp8.zero3_gather: fp8: the FP8 blocks' units are all-gathered as E4M3 (framework/model/zero_fp8_gather.h).
  if (zero_ == 3 && options.fp8 && options.fp8_zero3_gather) {
    std::vector<bool> covered(layout_.units.size(), false);  // unit 1 + l is layer l
    for (int l = 0; l < int(s.L); ++l) covered[size_t(l + 1)] = fp8_layer(l);
    fp8_gather_ = std::make_unique<ZeroFp8Gather>(layout_, covered, shards_, shard_rank_, act, *comms.dp_cp, comms.tp,
                                                  arena);
  }
  // precision fp8 under checkpointing none: ln1, ln2 and g, which the backward reads only as weight-gradient operands,
  // are kept as transposed FP8 copies (framework/model/fp8_linear.h); their bf16 buffers are one set for such layers.
  Tensor fp8_shared_ln1, fp8_shared_ln2, fp8_shared_g;  // (N, C), (N, C), (N, Fl)
  bool fp8_shared_made = false;
  for (int64_t i = 0; i < s.L; ++i) {
    auto a = std::make_unique<BlockActs>();
    a->fp8_keep = keep_all && fp8_layer(int(i));
    if (keep_attention || i == 0) {
      a->att = arena.alloc(act, {N, qd}, "block: attention out");                  // (N, Hl*D)
      a->lse = arena.alloc(DType::f32, {s.B, s.Hl, s.n}, "block: attention lse");  // (B, Hl, n)
    } else {
      a->att = acts_[0]->att, a->lse = acts_[0]->lse;
    }
    if (keep_all || i == 0) {
      a->rstd1 = arena.alloc(DType::f32, {N}, "block: attn rstd");   // (N)
      if (a->fp8_keep && !fp8_shared_made) {
        fp8_shared_ln1 = arena.alloc(act, {N, C}, "block: attn norm out (fp8: one shared)");  // (N, C)
        fp8_shared_ln2 = arena.alloc(act, {N, C}, "block: mlp norm out (fp8: one shared)");   // (N, C)
        fp8_shared_g = arena.alloc(act, {N, Fl}, "block: mlp activation (fp8: one shared)");  // (N, Fl)
        fp8_shared_made = true;
      }
      a->ln1 = a->fp8_keep ? fp8_shared_ln1 : arena.alloc(act, {N, C}, "block: attn norm out");  // (N, C)
      a->q = arena.alloc(act, {N, qd}, "block: q");                  // (N, Hl*D)
      a->k = arena.alloc(act, {N, kvd}, "block: k");                 // (N, Hkvl*D)
      a->v = arena.alloc(act, {N, kvd}, "block: v");                 // (N, Hkvl*D)
      a->x_mid = arena.alloc(act, {N, C}, "block: residual after attention");  // (N, C)
      a->rstd2 = arena.alloc(DType::f32, {N}, "block: mlp rstd");   // (N)
      a->ln2 = a->fp8_keep ? fp8_shared_ln2 : arena.alloc(act, {N, C}, "block: mlp norm out");  // (N, C)
      const int64_t rows = keep_mlp_hidden_ ? N : mlp_chunk_;  // kept whole, or one chunk at a time
      a->h = s.swiglu ? arena.alloc(act, {rows, 2 * Fl}, "block: mlp gate|up")  // (rows, 2Fl)
                      : arena.alloc(act, {rows, Fl}, "block: mlp fc out");       // (rows, Fl)
      a->g = a->fp8_keep ? fp8_shared_g : arena.alloc(act, {rows, Fl}, "block: mlp activation");  // (rows, Fl)
      if (a->fp8_keep) {
        for (int64_t b = 0; b < N; b += fp8_->attention_chunk()) {
          const int64_t m = std::min(fp8_->attention_chunk(), N - b);
          a->ln1_t.push_back(fp8_->alloc_operand(arena, false, C, m, "block: attn norm out^T (fp8)"));  // (C, m)
        }
        for (int64_t b = 0; b < N; b += mlp_chunk_) {
          const int64_t m = std::min(mlp_chunk_, N - b);
          a->ln2_t.push_back(fp8_->alloc_operand(arena, false, C, m, "block: mlp norm out^T (fp8)"));  // (C, m)
          a->g_t.push_back(fp8_->alloc_operand(arena, false, Fl, m, "block: mlp activation^T (fp8)"));  // (Fl, m)
        }
      }
    } else {
      const BlockActs& shared = *acts_[0];
      a->rstd1 = shared.rstd1, a->ln1 = shared.ln1, a->q = shared.q, a->k = shared.k, a->v = shared.v;
      a->x_mid = shared.x_mid, a->rstd2 = shared.rstd2, a->ln2 = shared.ln2;
      a->h = shared.h, a->g = shared.g;
    }
    acts_.push_back(std::move(a));
  }
  final_rstd_ = arena.alloc(DType::f32, {N}, "final norm rstd");  // (N)
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(options.lm_head_chunk, N));
  head_scratch_ = arena.alloc(act, {chunk, s.V}, "lm head logits chunk");  // (chunk, V)

  if (options.forward_only) {  // no backward: the final norm's output alone, no gradient buffers
    final_out_ = arena.alloc(act, {N, C}, "final norm out");  // (N, C)
  } else {
    d_res_ = arena.alloc(act, {N, C}, "grad: residual stream / final norm out");  // (N, C)
    d_ln_ = arena.alloc(act, {N, C}, "grad: norm out / final norm out");         // (N, C)
    // Lifetimes that do not overlap share storage: final_out_ is last read by the fused head, before the
    // backward first writes d_res_; d_final_ is written by the head and read once by the final norm's
    // backward, before the first block backward writes d_ln_.
    final_out_ = d_res_;  // (N, C)
    d_final_ = d_ln_;     // (N, C)
    d_att_ = arena.alloc(act, {N, qd}, "grad: attention out");    // (N, Hl*D)
    d_q_ = arena.alloc(act, {N, qd}, "grad: q");                  // (N, Hl*D)
    d_k_ = arena.alloc(act, {N, kvd}, "grad: k");                 // (N, Hkvl*D)
    d_v_ = arena.alloc(act, {N, kvd}, "grad: v");                 // (N, Hkvl*D)
    d_h_ = s.swiglu ? arena.alloc(act, {mlp_chunk_, 2 * Fl}, "grad: mlp gate|up")  // (chunk, 2Fl)
                    : arena.alloc(act, {mlp_chunk_, Fl}, "grad: mlp hidden");        // (chunk, Fl)
    // GELU takes the activation gradient inside linear_dgelu (no buffer); SwiGLU needs it.
    if (s.swiglu) d_g_ = arena.alloc(act, {mlp_chunk_, Fl}, "grad: mlp activation");  // (chunk, Fl)
  }
  if (s.tp > 1 || shards_ > 1) gather_scratch_ = arena.alloc(DType::f32, {int64_t(1) << 20}, "tp gather scratch");  // (1M)

  RingAttentionShape ring;
  ring.batch = s.B, ring.local_tokens = s.n, ring.heads = s.Hl, ring.kv_heads = s.Hkvl, ring.head_dim = s.D;
  ring.dtype = act;
  ring.forward_only = options.forward_only;
  attention_ = std::make_unique<ContextAttention>(comms.ring ? *comms.ring : *comms.cp, comms.a2a ? *comms.a2a : no_a2a_,
                                                  options.layout, /*causal=*/true, ring, arena, options.dkv_wire,
                                                  /*head_groups=*/0, options.cp_gather);
  // fp8.attention: the FP8 backward ops, and on CUDA their code workspace from the arena (no backward: none).
  attention_->ring().set_fp8_backward(options.fp8 && options.fp8_attention, options.forward_only ? nullptr : &arena);
  // fp8.attention_kv: e4m3: K/V rounded to E4M3 and sent as codes (eval and generate too: the model trained on them).
  if (options.fp8 && options.fp8_attention && options.fp8_attention_kv) attention_->ring().set_kv_wire(DType::e4m3, arena);
}


int mlp_chunk_budget_log2(bool fp8, ActivationCheckpointing checkpointing) {
  return fp8 && checkpointing != ActivationCheckpointing::none ? 26 : 27;
}

int64_t resolve_mlp_chunk(int64_t requested, int64_t tokens, int64_t local_d_ff, bool fp8,
                          ActivationCheckpointing checkpointing) {
  RT_CHECK(requested >= -1, "train.mlp_chunk=" << requested << " must be -1 (auto), 0 (no chunking) or a token count");
  RT_CHECK(tokens > 0 && local_d_ff > 0, "mlp chunk: tokens and d_ff must be positive");
  if (requested > 0) return std::min(requested, tokens);
  if (requested == 0) return tokens;
  const int64_t budget = int64_t(1) << mlp_chunk_budget_log2(fp8, checkpointing);  // elements of a (chunk, Fl) buffer
  if (tokens * local_d_ff <= budget) return tokens;
  const int64_t chunk = std::max<int64_t>(256, budget / local_d_ff / 256 * 256);
  return std::min(chunk, tokens);
}

ModelComms ModelComms::from(ProcessGrid& grid) {
  ModelComms c;
  c.tp = &grid.tp(), c.cp = &grid.cp(), c.dp_cp = &grid.dp_cp();
  c.ring = &grid.ring(), c.a2a = &grid.a2a();
  c.tp_rank = grid.tp_rank();
  return c;
}

Model::BlockActs& Model::acts_for(int layer) { return *acts_[size_t(layer)]; }

Model::LayerWeights Model::layer_weights(const Tensor& flat, int layer) const {
  // flat: unit (layer + 1)'s buffer
  const std::string p = "layers." + std::to_string(layer) + ".";
  LayerWeights w;
  w.attn_norm = param_view(flat, p + "attn_norm.weight");
  w.wq = param_view(flat, p + "attn.wq.weight");
  w.wk = param_view(flat, p + "attn.wk.weight");
  w.wv = param_view(flat, p + "attn.wv.weight");
  w.wo = param_view(flat, p + "attn.wo.weight");
  w.mlp_norm = param_view(flat, p + "mlp_norm.weight");
  if (shape_.swiglu) {
    w.fc_or_w13 = param_pair_view(flat, p + "mlp.w1.weight", p + "mlp.w3.weight");  // (2Fl, C) = [w1; w3]
    w.proj_or_w2 = param_view(flat, p + "mlp.w2.weight");
  } else {
    w.fc_or_w13 = param_view(flat, p + "mlp.fc.weight");
    w.proj_or_w2 = param_view(flat, p + "mlp.proj.weight");
  }
  return w;
}

void Model::upload_batch(const Batch& batch) {
  RT_CHECK(batch.batch == shape_.B && batch.tokens_per_rank == shape_.n,
           "batch of " << batch.batch << " x " << batch.tokens_per_rank << " tokens given to a model built for "
                       << shape_.B << " x " << shape_.n);
  RT_CHECK(int64_t(batch.tokens.size()) == shape_.N() && int64_t(batch.targets.size()) == shape_.N() &&
               int64_t(batch.positions.size()) == shape_.N(),
           "batch vectors have the wrong sizes");
  for (int32_t t : batch.tokens)
    RT_CHECK(t >= 0 && t < shape_.V, "token " << t << " is outside the vocabulary [0, " << shape_.V
                                              << "); raise model.vocab_size or check the data");
  for (int32_t t : batch.targets)
    RT_CHECK(t >= -1 && t < shape_.V, "target " << t << " is outside the vocabulary [0, " << shape_.V << ")");
  copy_host_to_tensor(tokens_, batch.tokens.data());
  copy_host_to_tensor(targets_, batch.targets.data());
  upload_rope_table(batch.positions);
  // Documents: the ring takes the batch's document mask: host arrays on the CPU; on CUDA device copies, with the
  // host arrays for the ring's choice of steps to skip.
  if (!batch.doc_pos.empty()) {
    RT_CHECK(int64_t(batch.doc_pos.size()) == shape_.B * shape_.n * comms_.cp->size() &&
                 batch.doc_start.size() == batch.doc_pos.size(),
             "batch document arrays have the wrong sizes");
    doc_pos_ = batch.doc_pos;
    doc_start_ = batch.doc_start;
    if (tokens_.device.is_cpu()) {
      attention_->set_documents(doc_pos_.data(), doc_start_.data(), nullptr, nullptr, batch.cp_scheme);
    } else {
      RT_CHECK(doc_mask_dev_.numel() == 4 * int64_t(doc_pos_.size()),
               "model: a batch with documents, but the model was built without ModelOptions::documents "
               "(data.documents: eot)");
      const Tensor pos = doc_mask_dev_.slice(0, 1), start = doc_mask_dev_.slice(1, 2);
      copy_host_to_tensor(pos, doc_pos_.data());
      copy_host_to_tensor(start, doc_start_.data());
      attention_->set_documents(static_cast<const int64_t*>(pos.data), static_cast<const int64_t*>(start.data),
                                doc_pos_.data(), doc_start_.data(), batch.cp_scheme);
    }
  } else {
    attention_->set_documents(nullptr, nullptr);
  }
}

void Model::upload_rope_table(const std::vector<int32_t>& positions) {
  const int64_t n = shape_.n, rows = rope_table_rows_;  // positions: (B, n)
  if (rows == n)
    for (int64_t b = 1; b < shape_.B; ++b)
      RT_CHECK(std::equal(positions.begin(), positions.begin() + n, positions.begin() + b * n),
               "sample " << b << " of the batch has other RoPE positions than sample 0, but the model was built "
                         << "for positions shared by every sample (one RoPE table of n rows); per-sample "
                         << "positions need data.positions: document (ModelOptions::per_sample_positions)");
  // Only when they change: with global positions the table is built once; with document positions it changes
  // with the batch, and its rows are copied from rows per position value, each computed once in fp64.
  if (std::equal(positions.begin(), positions.begin() + rows, rope_table_positions_.begin(),
                 rope_table_positions_.end()))
    return;
  RT_CHECK(rope_freqs_.pairs == shape_.D / 2, "model: RoPE frequencies for " << rope_freqs_.pairs
                                                 << " pairs but head_dim " << shape_.D << " has " << shape_.D / 2);
  rope_table_positions_.assign(positions.begin(), positions.begin() + rows);
  if (rows == n) {
    build_rope_table_threaded(rope_table_host_, rope_table_positions_.data(), rows, rope_freqs_.inv_freq,
                              rope_freqs_.pairs, double(rope_freqs_.cos_sin_scale));
  } else {
    RT_CHECK(*std::min_element(rope_table_positions_.begin(), rope_table_positions_.end()) >= 0,
             "model: a negative RoPE position in the batch (document positions start at 0)");
    const int32_t max_pos = *std::max_element(rope_table_positions_.begin(), rope_table_positions_.end());
    const size_t row = size_t(shape_.D / 2) * 2;  // floats per table row
    const int64_t have = int64_t(rope_rows_by_position_.size() / row);
    if (max_pos >= have) {  // extend the per-position rows to [0, max_pos]
      std::vector<int32_t> more(size_t(max_pos + 1 - have));  // (new positions)
      for (size_t k = 0; k < more.size(); ++k) more[k] = int32_t(have + int64_t(k));
      std::vector<float> extra;  // (new positions, D/2, 2)
      build_rope_table_threaded(extra, more.data(), int64_t(more.size()), rope_freqs_.inv_freq, rope_freqs_.pairs,
                                double(rope_freqs_.cos_sin_scale));
      rope_rows_by_position_.insert(rope_rows_by_position_.end(), extra.begin(), extra.end());
    }
    rope_table_host_.resize(size_t(rows) * row);  // (B*n, D/2, 2)
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(rope_rows_by_position_.data() + size_t(rope_table_positions_[size_t(r)]) * row, row,
                  rope_table_host_.data() + size_t(r) * row);
  }
  copy_host_to_tensor(rope_table_, rope_table_host_.data());
}

void Model::rope_rows(const Tensor& x4, bool inverse) {
  const int64_t n = shape_.n;
  if (rope_table_rows_ == n) {  // every sample has the same positions: one call over the batch
    rope_from_table(x4, rope_table_, inverse);
    return;
  }
  for (int64_t b = 0; b < shape_.B; ++b)  // per sample: its (1, n, heads, D) rows and its n table rows
    rope_from_table(x4.slice(b, b + 1), rope_table_.slice(b * n, (b + 1) * n), inverse);
}

double Model::global_target_count(const Batch& batch) {
  double count = 0;
  for (int32_t t : batch.targets) count += t >= 0 ? 1 : 0;
  comms_.dp_cp->all_reduce_sum(&count, 1);
  return count;
}

}  // namespace rt
