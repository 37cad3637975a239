// own_bwd_part (parallel/cp/gather_backward.h): the key rows of one part as views (one sample) or as the mask's key
// range (several samples).
#include "parallel/cp/gather_backward.h"

namespace rt {

namespace {

// Key rows [lo, hi) of a (1, n, Hkv, D) tensor: (1, hi - lo, Hkv, D).
Tensor key_rows(const Tensor& t, int64_t lo, int64_t hi) {
  const int64_t W = t.shape[2] * t.shape[3];
  return t.view({t.numel()}).slice(lo * W, hi * W).view({1, hi - lo, t.shape[2], t.shape[3]});
}

}  // namespace

void own_bwd_part(OwnBwdPart part, int64_t m, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                  const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& own,
                  const AttnBwdOps& ops) {
  RT_CHECK(k.ndim == 4 && dk.ndim == 4 && k.shape[1] == dk.shape[1],
           "own_bwd_part: k " << k.shape_str() << " and dk " << dk.shape_str() << " must be (B, n, Hkv, D)");
  const int64_t B = k.shape[0], n = k.shape[1];
  RT_CHECK(m >= 0 && m <= n, "own_bwd_part: split at key row " << m << " of " << n);
  RT_CHECK(own.docs.on() && !own.causal && own.q_begin == 0 && own.q_end == -1 && own.k_begin == 0 && own.k_end == -1,
           "own_bwd_part: the own call takes a document mask over all rows and keys");
  const bool split = m > 0 && m < n;
  if (!split) {  // one call: part A is all of it
    if (part == OwnBwdPart::a) ops.fresh(q, k, v, dout, lse, delta, dq_acc, dk, dv, own);
    return;
  }
  const int64_t lo = part == OwnBwdPart::a ? 0 : m, hi = part == OwnBwdPart::a ? m : n;
  if (B == 1) {
    AttnMask mask = own;
    mask.docs.k_pos = own.docs.k_pos + lo;  // key row 0 of the view is row lo
    ops.fresh(q, key_rows(k, lo, hi), key_rows(v, lo, hi), dout, lse, delta, dq_acc, key_rows(dk, lo, hi),
              key_rows(dv, lo, hi), mask);
    return;
  }
  AttnMask mask = own;
  mask.k_begin = lo;
  mask.k_end = hi;
  if (part == OwnBwdPart::a) ops.fresh(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);  // zeroes all
  else ops.block(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);                          // adds [m, n)
}

}  // namespace rt
