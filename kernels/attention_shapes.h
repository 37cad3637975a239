// Shape checks of the attention ops, shared by the CPU and CUDA backends (kernels/cpu/attention/attention_common.h,
// kernels/cuda/attention/attention_common.cuh), which add their own dtype, device and head-dim checks. Keep C++17.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/tensor.h"

namespace rt {

struct AttnDims {
  int64_t B, Nq, Nk, H, Hkv, D, group;  // group = H / Hkv query heads per K/V head
};

// q (B,Nq,H,D), k and v (B,Nk,Hkv,D), H a multiple of Hkv.
inline AttnDims attn_shape_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  RT_CHECK(q.ndim == 4, op << ": q has shape " << q.shape_str() << ", expected (B,Nq,H,D)");
  RT_CHECK(k.ndim == 4, op << ": k has shape " << k.shape_str() << ", expected (B,Nk,Hkv,D)");
  AttnDims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], 1};
  check_shape(k, {d.B, d.Nk, d.Hkv, d.D}, op, "k (B,Nk,Hkv,D)");
  check_shape(v, {d.B, d.Nk, d.Hkv, d.D}, op, "v (B,Nk,Hkv,D)");
  RT_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0,
           op << ": query heads H=" << d.H << " must be a multiple of K/V heads Hkv=" << d.Hkv);
  d.group = d.H / d.Hkv;
  return d;
}

// The mask's sub-ranges with end = -1 resolved, checked against the row counts.
struct AttnRanges {
  int64_t q_begin, q_end, k_begin, k_end;
};

inline AttnRanges attn_ranges(const AttnMask& mask, int64_t Nq, int64_t Nk, const char* op) {
  AttnRanges r{mask.q_begin, mask.q_end < 0 ? Nq : mask.q_end, mask.k_begin, mask.k_end < 0 ? Nk : mask.k_end};
  RT_CHECK(0 <= r.q_begin && r.q_begin <= r.q_end && r.q_end <= Nq,
           op << ": query range [" << mask.q_begin << "," << mask.q_end << ") is outside the " << Nq
              << " query rows");
  RT_CHECK(0 <= r.k_begin && r.k_begin <= r.k_end && r.k_end <= Nk,
           op << ": key range [" << mask.k_begin << "," << mask.k_end << ") is outside the " << Nk << " key rows");
  return r;
}

// attn_fwd_whole_two_kv's arguments: the first source's dims (Nk its rows) and, in `list_rows`, the key list's
// length attn_second_kv_row(Nk) + Nk2. The mask must be the document mask over every row (no causal, no ranges),
// with k_stride covering the list.
inline AttnDims attn_two_kv_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                 const Tensor& v2, const AttnMask& mask, int64_t& list_rows, const char* op) {
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(k2.ndim == 4, op << ": k2 has shape " << k2.shape_str() << ", expected (B,Nk2,Hkv,D)");
  const int64_t Nk2 = k2.shape[1];
  check_shape(k2, {d.B, Nk2, d.Hkv, d.D}, op, "k2 (B,Nk2,Hkv,D)");
  check_shape(v2, {d.B, Nk2, d.Hkv, d.D}, op, "v2 (B,Nk2,Hkv,D)");
  RT_CHECK(mask.docs.on() && !mask.causal && mask.q_begin == 0 && mask.q_end == -1 && mask.k_begin == 0 &&
               mask.k_end == -1,
           op << ": takes the document mask over every query and key row (no causal mask, no row ranges)");
  list_rows = attn_second_kv_row(d.Nk) + Nk2;
  RT_CHECK(mask.docs.k_stride >= list_rows,
           op << ": docs.k_stride = " << mask.docs.k_stride << " is shorter than the key list ("
              << attn_second_kv_row(d.Nk) << " rows of k and its gap, then " << Nk2 << " of k2)");
  return d;
}

// The state of attn_fwd_block: acc (B,H,Nq,D), m and l (B,H,Nq).
inline void check_attn_state_shapes(const AttnDims& d, const AttnState& state, const char* op) {
  check_shape(state.acc, {d.B, d.H, d.Nq, d.D}, op, "state.acc (B,H,Nq,D)");
  check_shape(state.m, {d.B, d.H, d.Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {d.B, d.H, d.Nq}, op, "state.l (B,H,Nq)");
}

// The other tensors of attn_bwd_block: dout (B,Nq,H,D), lse and delta (B,H,Nq), dq_acc (B,Nq,H,D), dk_acc and
// dv_acc (B,Nk,Hkv,D).
inline void check_attn_bwd_shapes(const AttnDims& d, const Tensor& dout, const Tensor& lse, const Tensor& delta,
                                  const Tensor& dq_acc, const Tensor& dk_acc, const Tensor& dv_acc, const char* op) {
  check_shape(dout, {d.B, d.Nq, d.H, d.D}, op, "dout (B,Nq,H,D)");
  check_shape(lse, {d.B, d.H, d.Nq}, op, "lse (B,H,Nq)");
  check_shape(delta, {d.B, d.H, d.Nq}, op, "delta (B,H,Nq)");
  check_shape(dq_acc, {d.B, d.Nq, d.H, d.D}, op, "dq_acc (B,Nq,H,D)");
  check_shape(dk_acc, {d.B, d.Nk, d.Hkv, d.D}, op, "dk_acc (B,Nk,Hkv,D)");
  check_shape(dv_acc, {d.B, d.Nk, d.Hkv, d.D}, op, "dv_acc (B,Nk,Hkv,D)");
}

// The decode ops (attn_decode, attn_decode_partial): q (B,1,H,D), k and v (B,Nk,Hkv,D), kv_len (B) i32 on q's
// device or undefined, work f32 of at least attn_decode_work_elems elements on q's device (its counters zero: the
// CPU backend checks them, the CUDA one cannot without a host wait).
inline AttnDims attn_decode_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len,
                                 const Tensor& work, const char* op) {
  RT_CHECK(q.ndim == 4 && q.shape[1] == 1,
           op << ": q has shape " << q.shape_str() << ", expected (B,1,H,D): one new query per sequence");
  const AttnDims d = attn_shape_dims(q, k, v, op);
  RT_CHECK(k.device == q.device && v.device == q.device,
           op << ": k is on " << k.device.str() << " and v on " << v.device.str() << " but q is on " << q.device.str()
              << "; keep the cache on the query's device");
  if (kv_len.defined()) {
    check_shape(kv_len, {d.B}, op, "kv_len (B)");
    check_dtype(kv_len, DType::i32, op, "kv_len");
    RT_CHECK(kv_len.device == q.device,
             op << ": kv_len is on " << kv_len.device.str() << " but q is on " << q.device.str() << "; copy it there");
  }
  RT_CHECK(work.defined() && work.device == q.device,
           op << ": work must be an f32 tensor on " << q.device.str() << " (it is "
              << (work.defined() ? work.device.str() : std::string("undefined")) << ")");
  check_dtype(work, DType::f32, op, "work");
  const int64_t need = attn_decode_work_elems(d.B, d.H, d.Hkv, d.D, d.Nk);
  RT_CHECK(work.numel() >= need, op << ": work has " << work.numel() << " elements but B=" << d.B << ", H=" << d.H
                                    << ", Hkv=" << d.Hkv << ", D=" << d.D << ", Nk=" << d.Nk << " need " << need
                                    << "; size it with attn_decode_work_elems (kernels/attention.h) and zero it once");
  return d;
}

// The decode state: acc (B,H,1,D), m and l (B,H,1).
inline void check_attn_decode_state(const AttnDims& d, const AttnState& state, const char* op) {
  check_shape(state.acc, {d.B, d.H, 1, d.D}, op, "state.acc (B,H,1,D)");
  check_shape(state.m, {d.B, d.H, 1}, op, "state.m (B,H,1)");
  check_shape(state.l, {d.B, d.H, 1}, op, "state.l (B,H,1)");
}

}  // namespace rt
