// gathered_fwd_merge (parallel/cp/gather_forward.h): per sample b, the rows [lo, hi) of q are contiguous, so the call
// gets them as a (1, M, H, D) view with the mask's query positions moved to row lo; its outputs are sample b of the
// (B, M, H, D) / (B, H, M) scratch. One attn_fwd_merge folds all samples into out / lse.
#include "parallel/cp/gather_forward.h"

namespace rt {

namespace {

// Elements [b * per, (b + 1) * per) of t, viewed with the given shape.
Tensor part(const Tensor& t, int64_t b, int64_t per, std::initializer_list<int64_t> shape) {
  return t.view({t.numel()}).slice(b * per, (b + 1) * per).view(shape);
}

}  // namespace

void gathered_fwd_merge(const Tensor& q, const Tensor& gk, const Tensor& gv, const AttnMask& mask,
                        const QueryRowRange& rows, const Tensor& out2, const Tensor& lse2, const AttnState& scratch,
                        Tensor out, Tensor lse) {
  RT_CHECK(q.ndim == 4 && gk.ndim == 4 && gk.shape[0] == q.shape[0],
           "gathered_fwd_merge: q " << q.shape_str() << " and gk " << gk.shape_str()
                                    << " must be (B, n, H, D) and (B, R, Hkv, D)");
  const int64_t B = q.shape[0], n = q.shape[1], H = q.shape[2], D = q.shape[3], R = gk.shape[1], Hkv = gk.shape[2];
  const int64_t M = rows.hi - rows.lo;
  RT_CHECK(!rows.empty() && rows.lo >= 0 && rows.hi <= n,
           "gathered_fwd_merge: query rows [" << rows.lo << ", " << rows.hi << ") are empty or outside the " << n
                                              << " rows (skip the gathered call when no row sees a gathered key)");
  RT_CHECK(mask.docs.on() && !mask.causal && mask.q_begin == 0 && mask.q_end == -1 && mask.k_begin == 0 &&
               mask.k_end == -1,
           "gathered_fwd_merge: the gathered call takes a document mask over all rows and keys");
  RT_CHECK(out2.numel() >= B * M * H * D && lse2.numel() >= B * H * M && scratch.acc.numel() >= H * M * D &&
               scratch.m.numel() >= H * M && scratch.l.numel() >= H * M,
           "gathered_fwd_merge: scratch too small for " << B << " x " << M << " rows (allocate it for all n rows)");
  const Tensor o2 = out2.view({out2.numel()}).slice(0, B * M * H * D);  // (B, M, H, D)
  const Tensor l2 = lse2.view({lse2.numel()}).slice(0, B * H * M);      // (B, H, M) f32
  AttnState st;  // (1, H, M, D), (1, H, M), (1, H, M): sample scratch
  st.acc = part(scratch.acc, 0, H * M * D, {1, H, M, D});
  st.m = part(scratch.m, 0, H * M, {1, H, M});
  st.l = part(scratch.l, 0, H * M, {1, H, M});
  for (int64_t b = 0; b < B; ++b) {
    const Tensor qb =  // (1, M, H, D): rows [lo, hi) of sample b
        q.view({q.numel()}).slice((b * n + rows.lo) * H * D, (b * n + rows.hi) * H * D).view({1, M, H, D});
    AttnMask mb;
    mb.docs = mask.docs;
    mb.docs.q_pos = mask.docs.q_pos + b * mask.docs.q_stride + rows.lo;
    mb.docs.q_doc_start = mask.docs.q_doc_start + b * mask.docs.q_stride + rows.lo;
    mb.docs.k_pos = mask.docs.k_pos + b * mask.docs.k_stride;
    attn_fwd_whole(qb, part(gk, b, R * Hkv * D, {1, R, Hkv, D}), part(gv, b, R * Hkv * D, {1, R, Hkv, D}), st, mb,
                   part(o2, b, M * H * D, {1, M, H, D}), part(l2, b, H * M, {1, H, M}));
  }
  attn_fwd_merge(out, lse, o2.view({B, M, H, D}), l2.view({B, H, M}), rows.lo);
}

}  // namespace rt
