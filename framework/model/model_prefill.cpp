// Generation's prefill (framework/model/model.h "Generation", DESIGN.md "Generate").
// prefill_forward: the training forward's blocks and nothing after them. The training forward's fused LM head and
// loss ran over every row of the prompt (V logits a row, though only the last prompt token's are ever used, and
// those come from the first decode step); the prefill skips it. Generation's model is built forward-only
// (ModelOptions::forward_only): one set of block buffers, two alternating residual buffers, no gradient buffers.
// Chunked prefill: a long prompt's prefill as a run of
// chunks, each sharded over the cp ranks (rank r holds the chunk's rows [slot(r) n, (slot(r) + 1) n), query row i of
// rank s at global position start + slot(s) n + i; prefill_chunk_slot) and run through prefill_forward, except
// the attention, which reads the KV cache instead of a ring. Per layer, after RoPE:
//   this rank appends its prompt rows' K / V to its cache shard;
//   cp = 1: the shard holds positions [0, rows) in order: one causal call, key j visible to query i iff
//           j <= start + i;
//   cp > 1: the chunk's queries are all-gathered over cp; for each rank s, s's queries attend over this rank's
//           shard into an fp32 state: rows of earlier chunks are all visible; this rank's rows of this chunk are
//           visible to ranks of later slots, causally to itself and not to ranks of earlier slots (one call, the
//           chunk's rows last in the shard); the states go to their ranks all-to-all, and each rank merges the cp
//           states of its queries in cp-rank order, then finalizes.
// A rank's activations are those of n = ceil(chunk / cp) tokens whatever the prompt's length; the cache grows by
// the chunk. Exact up to the order of the online-softmax sums (tests/hf/test_generate.py "chunks").
#include <algorithm>

#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {

void Model::prefill_chunk(KvCache& c, const std::vector<int32_t>& tokens, int64_t chunk, int64_t start,
                          int64_t valid) {
  const ModelShape& s = shape_;
  const int64_t n = s.n, cps = comms_.cp->size(), slot = prefill_chunk_slot(comms_.cp->rank(), chunk, cps);
  const int64_t mine = std::clamp<int64_t>(valid - slot * n, 0, n);  // this rank's prompt rows of the chunk
  RT_CHECK(s.B == 1 && int64_t(tokens.size()) == n, "generate: a prefill chunk of " << tokens.size()
               << " tokens per rank given to a model built for " << s.B << " x " << n);
  RT_CHECK(c.chunk_state.numel() == cps * s.Hl * n * (s.D + 2),
           "generate: the KV cache was made without the chunked prefill's buffers (make_kv_cache chunked_prefill)");
  RT_CHECK(valid >= 1 && valid <= cps * n, "generate: a chunk of " << valid << " prompt tokens, but the cp group "
                                                << "holds " << cps << " x " << n);
  RT_CHECK(c.rows + mine <= c.capacity, "generate: this rank's KV cache is full (" << c.capacity << " rows; the "
               "chunk needs " << mine << " more after " << c.rows << ")");
  RT_CHECK(start >= 0 && start + cps * n <= int64_t(INT32_MAX), "generate: chunk position " << start
                                                                     << " out of range");
  Batch batch;
  batch.batch = 1;
  batch.tokens_per_rank = n;
  batch.tokens = tokens;                // (1, n)
  batch.targets.assign(size_t(n), -1);  // (1, n): no loss
  batch.positions.resize(size_t(n));    // (1, n)
  batch.groups.assign(size_t(n), 0);    // (1, n)
  for (int64_t j = 0; j < n; ++j) batch.positions[size_t(j)] = int32_t(start + slot * n + j);
  chunk_ = {&c, chunk, start, valid};
  try {
    prefill_forward(batch);
  } catch (...) {
    chunk_ = {};
    throw;
  }
  chunk_ = {};
  c.rows += mine;
}

void Model::prefill_forward(const Batch& batch) {
  const ModelShape& s = shape_;
  upload_batch(batch);
  offload_begin_step(/*want_grad=*/false);
  if (fp8_) fp8_->begin_step();  // the weights may have changed since the last pass: no held FP8 copy or amax reused
  prefetch_weights(0);
  const Tensor embedding = unit_weights(0);
  prefetch_weights(1);
  embedding_fwd(residual_[0], tokens_, param_view(embedding, "tok_embeddings.weight"));
  for (int l = 0; l < s.L; ++l) {
    unit_weights(l + 1);
    prefetch_weights(l + 2);
    block_forward(l, acts_for(l), BlockPass::forward);
    offload_after_forward(l);
  }
  unit_weights(int(s.L) + 1);  // zero 3: settles the head's gather the last layer posted (no head runs)
  float done = 0;              // the last block's final-norm output: waiting for it waits for the whole prefill
  copy_tensor_to_host(&done, final_rstd_.slice(0, 1));
}

void Model::chunk_attention(int layer, const Tensor& q4, const Tensor& k, const Tensor& v, Tensor out4, Tensor lse) {
  const ModelShape& s = shape_;
  KvCache& c = *chunk_.cache;
  Comm& cp = *comms_.cp;
  const int64_t n = s.n, cps = cp.size(), rows0 = c.rows;
  const auto slot = [&](int64_t rank) { return prefill_chunk_slot(rank, chunk_.index, cps); };
  const int64_t me = slot(cp.rank());  // this rank's slot
  const int64_t mine = std::clamp<int64_t>(chunk_.valid - me * n, 0, n), rows = rows0 + mine;
  const Tensor kc = c.k[size_t(layer)], vc = c.v[size_t(layer)];  // (capacity, Hkvl*D)
  if (mine > 0) {
    copy_cast(kc.slice(rows0, rows), k.slice(0, mine));
    copy_cast(vc.slice(rows0, rows), v.slice(0, mine));
  }
  // Cache rows [0, b) as (1, b, Hkvl, D).
  const auto cached = [&](const Tensor& t, int64_t b) { return t.slice(0, b).view({1, b, s.Hkvl, s.D}); };
  // Key j of this rank's shard: rows [0, rows0) hold earlier chunks (positions before `start`), rows [rows0, rows)
  // this chunk's positions start + me n + (j - rows0). With k_offset = start + me n - rows0, the causal rule
  // k_offset + j <= q_offset + i keeps both right for the queries of this rank.
  AttnMask own;
  own.causal = true;
  own.k_offset = chunk_.start + me * n - rows0;
  const int64_t w = s.Hl * n * (s.D + 2);
  if (cps == 1) {
    own.q_offset = chunk_.start;  // me = 0
    AttnState scratch = packed_state_views(c.chunk_state.view({w}), s.Hl, n, s.D);
    attn_fwd_whole(q4, cached(kc, rows), cached(vc, rows), scratch, own, out4, lse);
    return;
  }
  cp.wait(cp.all_gather_start(q4.view({n, s.Hl * s.D}), c.chunk_q));  // (cp*n, Hl*D): rank s's queries at s*n
  for (int64_t r = 0; r < cps; ++r) {  // rank r's queries over this rank's shard
    AttnState st = packed_state_views(c.chunk_state.slice(r, r + 1).view({w}), s.Hl, n, s.D);
    const Tensor q = c.chunk_q.slice(r * n, (r + 1) * n).view({1, n, s.Hl, s.D});
    const int64_t keys = slot(r) < me ? rows0 : rows;  // this chunk's rows come after every query of earlier slots
    AttnMask mask;                                     // all visible (other ranks), or causal (this rank)
    if (slot(r) == me) {
      mask = own;
      mask.q_offset = chunk_.start + me * n;
    }
    if (keys == 0) attn_state_reset(st);
    else attn_fwd_block_first(q, cached(kc, keys), cached(vc, keys), st, mask);
  }
  cp.wait(cp.all_to_all_start(c.chunk_state.view({cps * w}), c.chunk_states.view({cps * w})));
  AttnState merged = packed_state_views(c.chunk_states.slice(0, 1).view({w}), s.Hl, n, s.D);
  for (int64_t r = 1; r < cps; ++r)
    attn_state_merge(merged, packed_state_views(c.chunk_states.slice(r, r + 1).view({w}), s.Hl, n, s.D));
  attn_fwd_finalize(merged, out4, lse);
}

}  // namespace rt
