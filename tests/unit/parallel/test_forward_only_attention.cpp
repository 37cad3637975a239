// A forward-only RingAttention (eval, generate: RingAttentionShape::forward_only) holds none of the backward's
// buffers: its measured arena is smaller than the training one's by at least the dK|dV accumulator and delta, its
// forward gives the same bits as the training one's, and its backward refuses, naming why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/comm.h"
#include "parallel/cp/ring_attention.h"

namespace rt {
namespace {

RingAttentionShape shape_of(bool forward_only) {
  RingAttentionShape s;
  s.batch = 1, s.local_tokens = 64, s.heads = 4, s.kv_heads = 2, s.head_dim = 16, s.dtype = DType::f32;
  s.forward_only = forward_only;
  return s;
}

double measured_bytes(bool forward_only) {
  LocalComm cp;
  Arena measuring = Arena::measuring(Device::cpu());
  { RingAttention a(cp, Layout::contiguous, /*causal=*/true, shape_of(forward_only), measuring); }
  return double(measuring.peak());
}

// out (B, n, H, D) of one forward on seeded inputs.
std::vector<float> forward_out(bool forward_only) {
  const RingAttentionShape s = shape_of(forward_only);
  const int64_t n = s.local_tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(size_t(n * H * D)), k(size_t(n * Hkv * D)), v(size_t(n * Hkv * D));
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = nd(rng);
  std::vector<float> out(size_t(n * H * D), std::nanf("")), lse(size_t(H * n), std::nanf(""));
  LocalComm cp;
  Arena measuring = Arena::measuring(Device::cpu());
  { RingAttention sizing(cp, Layout::contiguous, true, s, measuring); }
  Arena arena(Device::cpu(), measuring.peak());
  RingAttention a(cp, Layout::contiguous, true, s, arena);
  const Device cpu = Device::cpu();
  a.forward(Tensor(q.data(), DType::f32, cpu, {1, n, H, D}), Tensor(k.data(), DType::f32, cpu, {1, n, Hkv, D}),
            Tensor(v.data(), DType::f32, cpu, {1, n, Hkv, D}), Tensor(out.data(), DType::f32, cpu, {1, n, H, D}),
            Tensor(lse.data(), DType::f32, cpu, {1, H, n}));
  if (forward_only) {
    EXPECT_THROW(a.backward(Tensor(q.data(), DType::f32, cpu, {1, n, H, D}),
                            Tensor(k.data(), DType::f32, cpu, {1, n, Hkv, D}),
                            Tensor(v.data(), DType::f32, cpu, {1, n, Hkv, D}),
                            Tensor(out.data(), DType::f32, cpu, {1, n, H, D}),
                            Tensor(out.data(), DType::f32, cpu, {1, n, H, D}),
                            Tensor(lse.data(), DType::f32, cpu, {1, H, n}),
                            Tensor(q.data(), DType::f32, cpu, {1, n, H, D}),
                            Tensor(k.data(), DType::f32, cpu, {1, n, Hkv, D}),
                            Tensor(v.data(), DType::f32, cpu, {1, n, Hkv, D})),
                 Error);
  }
  return out;
}

TEST(ForwardOnlyAttention, HoldsNoBackwardBuffersAndGivesTheSameForward) {
  const RingAttentionShape s = shape_of(false);
  // dK|dV (2, B, n, Hkv, D) f32 and delta (B, H, n) f32: the cp = 1 backward's own buffers.
  const double backward_bytes = 4.0 * double(2 * s.batch * s.local_tokens * s.kv_heads * s.head_dim) +
                                4.0 * double(s.batch * s.heads * s.local_tokens);
  const double train = measured_bytes(false), forward = measured_bytes(true);
  EXPECT_LE(forward, train - backward_bytes) << "training " << train << " B, forward-only " << forward << " B";
  const std::vector<float> a = forward_out(false), b = forward_out(true);
  for (float x : b) ASSERT_FALSE(std::isnan(x)) << "NaN in the forward-only output";
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "the forward changed";
}

}  // namespace
}  // namespace rt
