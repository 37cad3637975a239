// Generation on the model (framework/model/model.h "Generation", DESIGN.md "Generate"): the KV cache a prefill
// fills from the training forward, and one decode step of a single new token against the cache sharded over the
// cp group.
//   decode step, on every rank of the cp x tp grid (each computes the token's embedding, norms, MLP and logits;
//   tp splits the heads and the MLP width as in training):
//     x = embed(token); per layer: q, k, v of the local heads -> RoPE at the token's global position -> the owner
//     rank appends k, v to its shard -> cp = 1: attn_decode over the cache; cp > 1: attn_decode_partial over this
//     rank's rows (fp32 m, l, acc) -> all-gather the states over cp, merged in cp-rank order (every rank gets
//     bit-identical results) -> attn_fwd_finalize -> wo (all-reduce over tp) -> + x -> RMSNorm -> MLP (all-reduce
//     over tp) -> + residual; final RMSNorm -> logits (1, V) with the (replicated) LM head.
//   At tp = 1 both residual adds run inside their GEMMs (beta 1), and each RMSNorm, and SwiGLU, inside the GEMM after
//   it (kernels/decode_linear.h, one launch on a GPU, the same bits): 7 launches a layer.
// decode_step sets the step's inputs from the host and runs the launches; the graphed decode (one rank,
// framework/eval/decode_graph.h) writes the same inputs into KvCache::step_inputs with decode_step_inputs and runs
// decode_step_from_inputs, whose launches read every per-step value on the device (a CUDA graph replays them).
#include <algorithm>
#include <cstring>

#include "framework/model/model_internal.h"
#include "kernels/attention.h"
#include "kernels/decode_append.h"
#include "kernels/decode_linear.h"
#include "kernels/ops.h"
#include "kernels/rope_table.h"

namespace rt {

AttnState packed_state_views(const Tensor& packed, int64_t H, int64_t rows, int64_t D) {
  const int64_t acc = H * rows * D, ml = H * rows;
  RT_CHECK(packed.numel() == acc + 2 * ml, "a packed attention state of " << packed.numel() << " elements, expected "
                                               << H << " heads x " << rows << " rows x (" << D << " + 2)");
  AttnState s;
  s.acc = packed.slice(0, acc).view({1, H, rows, D});
  s.m = packed.slice(acc, acc + ml).view({1, H, rows});
  s.l = packed.slice(acc + ml, acc + 2 * ml).view({1, H, rows});
  return s;
}

namespace {

// Views of a packed (Hl*(D+2)) f32 state: acc (1,Hl,1,D) | m (1,Hl,1) | l (1,Hl,1).
AttnState state_views(const Tensor& packed, int64_t Hl, int64_t D) { return packed_state_views(packed, Hl, 1, D); }

// Columns [begin, begin + width) of a one-row (1, W) tensor, as (1, width): contiguous, so a plain view.
Tensor view_columns(const Tensor& row, int64_t begin, int64_t width) {
  RT_CHECK(row.ndim == 2 && row.shape[0] == 1 && begin >= 0 && begin + width <= row.shape[1],
           "decode: columns [" << begin << ", " << begin + width << ") of a " << row.shape_str() << " row");
  return Tensor(static_cast<char*>(row.data) + begin * dtype_size(row.dtype), row.dtype, row.device, {1, width});
}

// Whether b starts where a ends (same dtype and device): two weights one GEMM can read as one matrix.
bool adjacent(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.device == b.device &&
         static_cast<const char*>(a.data) + a.nbytes() == static_cast<const char*>(b.data);
}

}  // namespace

KvCache Model::make_kv_cache(Arena& arena, int64_t capacity, bool chunked_prefill) const {
  const ModelShape& s = shape_;
  const DType act = options_.act_dtype;
  RT_CHECK(capacity >= 1, "generate: a KV cache needs at least one row per rank, got " << capacity);
  KvCache c;
  c.capacity = capacity;
  for (int64_t l = 0; l < s.L; ++l) {
    c.k.push_back(arena.alloc(act, {capacity, s.Hkvl * s.D}, "kv cache: K"));  // (capacity, Hkvl*D)
    c.v.push_back(arena.alloc(act, {capacity, s.Hkvl * s.D}, "kv cache: V"));  // (capacity, Hkvl*D)
  }
  const int64_t cp = comms_.cp ? comms_.cp->size() : 1;
  const int64_t F2 = s.swiglu ? 2 * s.Fl : s.Fl;
  c.step_inputs = arena.alloc(DType::f32, {4 + s.D}, "decode: step inputs");       // (4 + D) words
  float* const words = c.step_inputs.ptr<float>();
  const Device device = c.step_inputs.device;
  c.token = Tensor(words, DType::i32, device, {1});                                // (1) word 0
  c.kv_len = Tensor(words + 1, DType::i32, device, {1});                           // (1) word 1
  c.append_row = Tensor(words + 2, DType::i32, device, {1});                       // (1) word 2
  c.rope = Tensor(words + 4, DType::f32, device, {1, s.D / 2, 2});                 // (1, D/2, 2) words [4, 4 + D)
  c.x = arena.alloc(act, {1, s.C}, "decode: x");                                   // (1, C)
  c.out = arena.alloc(act, {1, s.C}, "decode: out");                               // (1, C)
  c.x_mid = arena.alloc(act, {1, s.C}, "decode: x_mid");                           // (1, C)
  c.ln = arena.alloc(act, {1, s.C}, "decode: ln");                                 // (1, C)
  c.ln2 = arena.alloc(act, {1, s.C}, "decode: ln2");                               // (1, C)
  c.rstd = arena.alloc(DType::f32, {1}, "decode: rstd");                           // (1)
  const int64_t qd = s.Hl * s.D, kvd = s.Hkvl * s.D;
  c.qkv = arena.alloc(act, {1, qd + 2 * kvd}, "decode: q | k | v");               // (1, qd + 2 kvd)
  c.q = view_columns(c.qkv, 0, qd);                                                // (1, Hl*D)
  c.k_new = view_columns(c.qkv, qd, kvd);                                          // (1, Hkvl*D)
  c.v_new = view_columns(c.qkv, qd + kvd, kvd);                                    // (1, Hkvl*D)
  c.att = arena.alloc(act, {1, s.Hl * s.D}, "decode: att");                        // (1, Hl*D)
  c.h = arena.alloc(act, {1, F2}, "decode: mlp h");                                // (1, Fl | 2Fl)
  c.g = arena.alloc(act, {1, s.Fl}, "decode: mlp g");                              // (1, Fl)
  c.state = arena.alloc(DType::f32, {s.Hl * (s.D + 2)}, "decode: state");          // (Hl*(D+2))
  c.gathered = arena.alloc(DType::f32, {cp, s.Hl * (s.D + 2)}, "decode: states");  // (cp, Hl*(D+2))
  c.lse = arena.alloc(DType::f32, {1, s.Hl, 1}, "decode: lse");                    // (1, Hl, 1)
  c.work = arena.alloc(DType::f32, {attn_decode_work_elems(1, s.Hl, s.Hkvl, s.D, capacity)},
                       "decode: split-KV work");
  if (!arena.is_measuring()) fill(c.work, 0.f);  // its arrival counters start at zero; each decode call leaves them so
  c.logits = arena.alloc(act, {1, s.V}, "decode: logits");                          // (1, V)
  if (chunked_prefill) {
    const int64_t w = s.Hl * s.n * (s.D + 2);
    c.chunk_state = arena.alloc(DType::f32, {cp, w}, "prefill chunk: attention states out");  // (cp, Hl*n*(D+2))
    if (cp > 1) {
      c.chunk_states = arena.alloc(DType::f32, {cp, w}, "prefill chunk: attention states in");  // (cp, Hl*n*(D+2))
      c.chunk_q = arena.alloc(act, {cp * s.n, s.Hl * s.D}, "prefill chunk: gathered queries");   // (cp*n, Hl*D)
    }
  }
  return c;
}

void Model::capture_kv(int layer, const Tensor& k, const Tensor& v) {
  KvCache& c = *kv_capture_;
  const std::vector<int64_t>& rows = c.capture;
  RT_CHECK(int64_t(rows.size()) <= c.capacity, "generate: the prefill keeps " << rows.size() << " rows but the cache "
                                                   << "holds " << c.capacity);
  // Contiguous runs of kept rows, one copy each (zigzag: at most two runs).
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    const int64_t src = rows[i], len = int64_t(j - i), dst = int64_t(i);
    copy_cast(c.k[size_t(layer)].slice(dst, dst + len), k.slice(src, src + len));
    copy_cast(c.v[size_t(layer)].slice(dst, dst + len), v.slice(src, src + len));
    i = j;
  }
}

void Model::decode_step(KvCache& c, int64_t position, bool append_here) {
  RT_CHECK(zero_ != 3, "generate: decode needs the whole compute weights (parallel.zero < 3)");
  RT_CHECK(!append_here || c.rows < c.capacity, "generate: this rank's KV cache is full (" << c.capacity << " rows)");
  RT_CHECK(position >= 0 && position <= int64_t(INT32_MAX), "generate: position " << position << " out of range");
  const int32_t pos32 = int32_t(position);
  std::vector<float> rope_row;  // (1, D/2, 2)
  build_rope_table(rope_row, &pos32, 1, rope_freqs_.inv_freq, rope_freqs_.pairs, double(rope_freqs_.cos_sin_scale));
  copy_host_to_tensor(c.rope, rope_row.data());
  const int32_t kv_len = int32_t(c.rows + (append_here ? 1 : 0));
  copy_host_to_tensor(c.kv_len, &kv_len);
  decode_launches(c, append_here, /*append_on_device=*/false);
}

void Model::decode_step_inputs(void* host, const KvCache& c, int32_t token, int64_t position, int32_t kv_len,
                               int32_t append_row) const {
  const ModelShape& s = shape_;
  RT_CHECK(position >= 0 && position <= int64_t(INT32_MAX), "generate: position " << position << " out of range");
  RT_CHECK(kv_len >= 0 && kv_len <= c.capacity && append_row < c.capacity,
           "generate: a decode step over " << kv_len << " rows appending at row " << append_row << " does not fit "
                                           << "this rank's KV cache of " << c.capacity << " rows");
  const int32_t pos32 = int32_t(position);
  std::vector<float> rope_row;  // (1, D/2, 2)
  build_rope_table(rope_row, &pos32, 1, rope_freqs_.inv_freq, rope_freqs_.pairs, double(rope_freqs_.cos_sin_scale));
  RT_CHECK(int64_t(rope_row.size()) == s.D, "generate: a RoPE row of " << rope_row.size() << " values, expected "
                                                << s.D);
  char* const out = static_cast<char*>(host);  // (4 + D) words, the layout of KvCache::step_inputs
  const int32_t head[4] = {token, kv_len, append_row, 0};
  std::memcpy(out, head, sizeof(head));
  std::memcpy(out + sizeof(head), rope_row.data(), rope_row.size() * sizeof(float));
}

void Model::decode_step_from_inputs(KvCache& c) {
  RT_CHECK(zero_ != 3, "generate: decode needs the whole compute weights (parallel.zero < 3)");
  RT_CHECK((comms_.cp ? comms_.cp->size() : 1) == 1 && shape_.tp == 1,
           "generate: the graphed decode step runs on one rank (no cp / tp communication inside); use "
           "--cuda-graph off on this grid");
  decode_launches(c, /*append_here=*/false, /*append_on_device=*/true);
}

void Model::decode_launches(KvCache& c, bool append_here, bool append_on_device) {
  const ModelShape& s = shape_;
  Comm* cp = comms_.cp;
  const int64_t cps = cp ? cp->size() : 1;
  embedding_fwd(c.x, c.token, param_view(unit_weights(0), "tok_embeddings.weight"));
  // (1, C) each: the block's input (at tp = 1 also its residual and output: the adds run in the GEMMs); at tp > 1 its
  // residual after attention and its output, rotated after every block.
  Tensor x = c.x, mid = c.x_mid, out = c.out;
  for (int layer = 0; layer < s.L; ++layer) {
    const LayerWeights w = layer_weights(unit_weights(layer + 1), layer);
    if (adjacent(w.wq, w.wk) && adjacent(w.wk, w.wv)) {  // [wq; wk; wv] one (qd + 2 kvd, C) matrix: one GEMM
      const Tensor wqkv(w.wq.data, w.wq.dtype, w.wq.device, {c.qkv.shape[1], s.C});
      rmsnorm_linear_row(c.qkv, x, w.attn_norm, config_.norm_eps, wqkv, c.ln, c.rstd);  // (1, qd + 2 kvd) = q | k | v
    } else {
      rmsnorm_fwd(c.ln, c.rstd, x, w.attn_norm, config_.norm_eps);
      gemm(c.q, c.ln, w.wq, false, true);      // (1, Hl*D)
      gemm(c.k_new, c.ln, w.wk, false, true);  // (1, Hkvl*D)
      gemm(c.v_new, c.ln, w.wv, false, true);  // (1, Hkvl*D)
    }
    const Tensor q4 = c.q.view({1, 1, s.Hl, s.D});
    // q and k adjacent in qkv at the same position: one RoPE over their Hl + Hkvl heads.
    rope_from_table(Tensor(c.qkv.data, c.qkv.dtype, c.qkv.device, {1, 1, s.Hl + s.Hkvl, s.D}), c.rope, false);
    Tensor kc = c.k[size_t(layer)], vc = c.v[size_t(layer)];  // (capacity, Hkvl*D)
    if (append_here) {
      copy_cast(kc.slice(c.rows, c.rows + 1), c.k_new);
      copy_cast(vc.slice(c.rows, c.rows + 1), c.v_new);
    } else if (append_on_device) {
      append_kv_row(kc, vc, c.k_new, c.v_new, c.append_row);  // at the row the step inputs name
    }
    const Tensor k4 = kc.view({1, c.capacity, s.Hkvl, s.D}), v4 = vc.view({1, c.capacity, s.Hkvl, s.D});
    if (cps == 1) {  // the whole cache here: attention and its normalisation in one call
      attn_decode(q4, k4, v4, c.kv_len, c.work, c.att.view({1, 1, s.Hl, s.D}), c.lse);
    } else {  // every rank's (m, l, acc), merged in cp-rank order into row 0, then normalised
      AttnState mine = state_views(c.state, s.Hl, s.D);
      attn_decode_partial(q4, k4, v4, c.kv_len, c.work, mine);
      cp->wait(cp->all_gather_start(c.state, c.gathered.view({cps * s.Hl * (s.D + 2)})));
      AttnState merged = state_views(c.gathered.slice(0, 1).view({s.Hl * (s.D + 2)}), s.Hl, s.D);
      for (int64_t r = 1; r < cps; ++r)
        attn_state_merge(merged, state_views(c.gathered.slice(r, r + 1).view({s.Hl * (s.D + 2)}), s.Hl, s.D));
      attn_fwd_finalize(merged, c.att.view({1, 1, s.Hl, s.D}), c.lse);
    }
    if (s.tp == 1) {  // the residual adds in the GEMMs (beta 1): x is the residual stream through the block
      gemm(x, c.att, w.wo, false, true, 1.f, 1.f);  // x += att @ wo^T
      if (s.swiglu) {  // the MLP's norm and SwiGLU inside its two GEMMs (one launch each on a GPU)
        rmsnorm_linear_row(c.h, x, w.mlp_norm, config_.norm_eps, w.fc_or_w13, c.ln2, c.rstd);  // (1, 2Fl) gate | up
        swiglu_linear_row(x, c.h, w.proj_or_w2, 1.f, c.g);  // x += swiglu(h) @ w2^T
      } else {
        rmsnorm_fwd(c.ln2, c.rstd, x, w.mlp_norm, config_.norm_eps);
        mlp_hidden_forward(/*layer=*/-1, 0, w, c.ln2, c.h, c.g);  // layer -1: a decode step keeps bf16 GEMMs
        gemm(x, c.g, w.proj_or_w2, false, true, 1.f, 1.f);
      }
    } else {
      gemm(mid, c.att, w.wo, false, true);  // (1, C), partial over tp
      tp_comm().all_reduce_sum(mid);
      add_rmsnorm_fwd(mid, x, c.ln2, c.rstd, w.mlp_norm, config_.norm_eps);  // mid += x; ln2 = norm(mid)
      mlp_hidden_forward(/*layer=*/-1, 0, w, c.ln2, c.h, c.g);
      gemm(out, c.g, w.proj_or_w2, false, true);  // (1, C), partial over tp
      tp_comm().all_reduce_sum(out);
      add_inplace(out, mid);
      std::swap(x, out);
    }
  }
  const Tensor head = unit_weights(int(s.L) + 1);
  const Tensor head_w =
      s.tied ? param_view(unit_weights(0), "tok_embeddings.weight") : param_view(head, "lm_head.weight");
  rmsnorm_linear_row(c.logits, x, param_view(head, "norm.weight"), config_.norm_eps, head_w, c.ln,
                     c.rstd);  // (1, V) = norm(x) (1, C) @ (V, C)^T
}

}  // namespace rt
