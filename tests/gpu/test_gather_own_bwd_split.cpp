// The gather scheme's own backward call in two parts on CUDA (parallel/cp/gather_backward.h own_bwd_part): part A then
// part B against one attn_bwd_block_fresh over every key on the same device, for one sample (each part a fresh call
// on views of its key rows: bwd v5's overwrite form where a part has >= 128 key rows) and for two (key ranges: part A
// zeroes every dK / dV row, part B adds into its rows), on each backward kernel the device has (v5, v4, v1 forced).
// Split points: tile multiples (128, 256, 384), inside a document (200), under a tile (64), the ends (0, n).
// Fresh random bf16 inputs with a document mask (sample 0: several documents with edges off the tiles, sample 1:
// one document), dk / dv NaN-poisoned (every row must be written), dq pre-filled with random values (both add).
// Bound: 1e-4 relative for dQ, dK, dV (the parts only regroup fp32 sums; a missing or doubled part is O(1)).
// Skips without a CUDA device.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/check.h"
#include "parallel/cp/gather_backward.h"
#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kN = 512, kH = 4, kHkv = 2, kD = 128;

// Device int64 array (positions, document starts).
struct DeviceI64 {
  explicit DeviceI64(const std::vector<int64_t>& v) {
    CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(int64_t)));
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  }
  ~DeviceI64() {
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) ADD_FAILURE() << "cudaFree: " << cudaGetErrorString(e);
  }
  DeviceI64(const DeviceI64&) = delete;
  DeviceI64& operator=(const DeviceI64&) = delete;
  int64_t* p = nullptr;
};

void check_split(int64_t B, int64_t m, const char* bwd_variant, uint64_t seed) {
  SCOPED_TRACE("B " + std::to_string(B) + " m " + std::to_string(m) + " bwd v" + bwd_variant);
  ScopedAttnVariant variant(nullptr, bwd_variant);
  const std::vector<std::vector<int64_t>> lengths = {{37, 163, 90, 5, 217}, {kN}};  // per sample, summing to kN
  std::vector<int64_t> pos, start;  // (B, kN): positions in row order, based past 2^32
  for (int64_t b = 0; b < B; ++b) {
    int64_t s = 0;
    for (int64_t len : lengths[size_t(b)]) {
      for (int64_t i = 0; i < len; ++i) {
        pos.push_back((int64_t(1) << 33) + s + i);
        start.push_back((int64_t(1) << 33) + s);
      }
      s += len;
    }
  }
  DeviceI64 d_pos(pos), d_start(start);
  AttnMask own;
  own.docs.q_pos = own.docs.k_pos = d_pos.p;
  own.docs.q_doc_start = d_start.p;
  own.docs.q_stride = own.docs.k_stride = kN;
  const DType bf = DType::bf16, f = DType::f32;
  Buffer q(gpu(), bf, {B, kN, kH, kD}), k(gpu(), bf, {B, kN, kHkv, kD}), v(gpu(), bf, {B, kN, kHkv, kD});
  Buffer dout(gpu(), bf, {B, kN, kH, kD}), out(gpu(), bf, {B, kN, kH, kD});
  Buffer lse(gpu(), f, {B, kH, kN}), delta(gpu(), f, {B, kH, kN});
  Buffer acc(gpu(), f, {B, kH, kN, kD}), sm(gpu(), f, {B, kH, kN}), sl(gpu(), f, {B, kH, kN});
  upload(q, bf16_rounded(random_vector(B * kN * kH * kD, seed, 1.2f)));
  upload(k, bf16_rounded(random_vector(B * kN * kHkv * kD, seed + 1, 1.2f)));
  upload(v, bf16_rounded(random_vector(B * kN * kHkv * kD, seed + 2)));
  upload(dout, bf16_rounded(random_vector(B * kN * kH * kD, seed + 3)));
  AttnState st{acc, sm, sl};
  attn_fwd_whole(q, k, v, st, own, out, lse);
  attn_bwd_delta(out, dout, delta);
  const std::vector<float> dq0 = random_vector(B * kN * kH * kD, seed + 4, 0.1f);
  Buffer dq1(gpu(), f, {B, kN, kH, kD}), dk1(gpu(), f, {B, kN, kHkv, kD}), dv1(gpu(), f, {B, kN, kHkv, kD});
  Buffer dq2(gpu(), f, {B, kN, kH, kD}), dk2(gpu(), f, {B, kN, kHkv, kD}), dv2(gpu(), f, {B, kN, kHkv, kD});
  upload(dq1, dq0);
  upload(dq2, dq0);
  for (const Tensor& t : {dk1.t(), dv1.t(), dk2.t(), dv2.t()}) poison(t);
  attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq1, dk1, dv1, own);
  own_bwd_part(OwnBwdPart::a, m, q, k, v, dout, lse, delta, dq2, dk2, dv2, own);
  own_bwd_part(OwnBwdPart::b, m, q, k, v, dout, lse, delta, dq2, dk2, dv2, own);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_CLOSE(download(dq2), download(dq1), 1e-4);
  EXPECT_CLOSE(download(dk2), download(dk1), 1e-4);
  EXPECT_CLOSE(download(dv2), download(dv1), 1e-4);
}

TEST(GatherOwnBwdSplitCuda, TwoPartsEqualOneCall) {
  RT_REQUIRE_CUDA();
  for (const char* variant : {"5", "4", "1"})
    for (int64_t B : {1, 2})
      for (int64_t m : {0, 64, 128, 200, 256, 384, 512}) check_split(B, m, variant, 900 + uint64_t(B * 100 + m));
}

}  // namespace
}  // namespace rt::test
