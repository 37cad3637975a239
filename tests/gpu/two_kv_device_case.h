// A TwoKvCase (tests/unit/kernels/two_kv_case.h) on the GPU, shared by the tests of attn_fwd_whole_two_kv and
// attn_bwd_block_fresh_two_kv (tests/gpu/test_attn_{fwd,bwd}_two_kv.cpp): the inputs as bf16, the positions as 64-bit
// values past 2^32 (kBase added to each), and the mask over them.
#pragma once
#include <memory>
#include <vector>

#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/kernels/two_kv_case.h"

namespace rt::test {

constexpr int64_t kBase = (int64_t(1) << 32) + 7;  // added to every position: 64-bit positions

inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

struct DeviceCase {
  Buffer q, k1, v1, k2, v2, qp, qd, kp;  // (B,n,H,D) bf16, sources bf16, positions int64 as i32 pairs
  AttnMask mask;
};

inline std::vector<int32_t> words(const std::vector<int64_t>& x) {  // int64 as (low, high) i32 words
  std::vector<int32_t> w;
  for (int64_t e : x) w.push_back(int32_t(uint32_t(e + kBase))), w.push_back(int32_t((e + kBase) >> 32));
  return w;
}

inline std::unique_ptr<DeviceCase> to_device(const TwoKvCase& c) {
  auto d = std::unique_ptr<DeviceCase>(new DeviceCase{
      Buffer(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}), Buffer(gpu(), DType::bf16, {c.B, c.n, c.Hkv, c.D}),
      Buffer(gpu(), DType::bf16, {c.B, c.n, c.Hkv, c.D}), Buffer(gpu(), DType::bf16, {c.B, c.R, c.Hkv, c.D}),
      Buffer(gpu(), DType::bf16, {c.B, c.R, c.Hkv, c.D}), Buffer(gpu(), DType::i32, {c.B * c.n * 2}),
      Buffer(gpu(), DType::i32, {c.B * c.n * 2}), Buffer(gpu(), DType::i32, {c.B * c.list * 2}), AttnMask{}});
  upload(d->q.t(), c.q);
  upload(d->k1.t(), c.k1);
  upload(d->v1.t(), c.v1);
  upload(d->k2.t(), c.k2);
  upload(d->v2.t(), c.v2);
  upload_i32(d->qp.t(), words(c.q_pos));
  upload_i32(d->qd.t(), words(c.q_doc));
  upload_i32(d->kp.t(), words(c.k_pos));
  d->mask = c.mask();
  d->mask.docs.q_pos = static_cast<const int64_t*>(d->qp.t().data);
  d->mask.docs.q_doc_start = static_cast<const int64_t*>(d->qd.t().data);
  d->mask.docs.k_pos = static_cast<const int64_t*>(d->kp.t().data);
  return d;
}

}  // namespace rt::test
