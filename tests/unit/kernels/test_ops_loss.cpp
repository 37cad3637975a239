// CPU cross_entropy against fp64 (losses and the gradient, also against central differences), and the
// chunked lm_head_loss against unchunked fp64 logits + cross-entropy with chunks that do not divide N.
#include <gtest/gtest.h>

#include "kernels/cpu/cpu_util.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

// Per-row -log softmax[target] (0 where target = -1), fp64.
std::vector<double> ce_ref(const std::vector<double>& logits, const std::vector<int32_t>& tgt, int64_t V) {
  std::vector<double> loss(tgt.size(), 0.0);
  for (size_t r = 0; r < tgt.size(); ++r) {
    if (tgt[r] < 0) continue;
    double mx = -INFINITY;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, logits[r * V + c]);
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(logits[r * V + c] - mx);
    loss[r] = mx + std::log(s) - logits[r * V + tgt[r]];
  }
  return loss;
}

std::vector<int32_t> targets_with_ignores(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937 gen{static_cast<uint32_t>(seed)};
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = int32_t(gen() % V);
  t[1] = -1;
  if (n > 5) t[size_t(n - 2)] = -1;
  return t;
}

HostTensor to_i32(const std::vector<int32_t>& v) {
  HostTensor t = test::i32({int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) t.i()[k] = v[k];
  return t;
}

TEST(CrossEntropyCpu, LossesAndGradient) {
  const int64_t n = 7, V = 37;
  const float scale = 0.37f;
  HostTensor logits = test::random_f32({n, V}, 1, -4.f, 4.f);
  logits[2 * V + 5] = 60.f;  // a large logit must not overflow
  const auto tgt = targets_with_ignores(n, V, 2);
  HostTensor targets = to_i32(tgt), losses = test::f32({n});
  const auto ld = logits.to_double();
  test::poison(losses);

  HostTensor copy = test::f32({n, V});
  copy_cast(copy, logits);
  cross_entropy(copy, targets, losses, scale, false);
  const auto loss_ref = ce_ref(ld, tgt, V);
  EXPECT_LT(test::rel_err(losses, loss_ref), 1e-6);
  EXPECT_LT(test::rel_err(copy, ld), 1e-12) << "want_grad=false must leave logits alone";

  test::poison(losses);
  cross_entropy(logits, targets, losses, scale, true);
  EXPECT_LT(test::rel_err(losses, loss_ref), 1e-6);
  // d(scale * sum loss)/d logits by central differences.
  const std::vector<double> ones(tgt.size(), double(scale));
  const auto fd = test::fd_grad([&](const std::vector<double>& l) { return ce_ref(l, tgt, V); }, ld, ones);
  EXPECT_LT(test::rel_err(logits, fd), 1e-5);
  for (int64_t c = 0; c < V; ++c) EXPECT_EQ(logits[1 * V + c], 0.f) << "ignored row must have zero gradient";
  EXPECT_EQ(losses[1], 0.f);
}

// A vocabulary long enough for the vectorised exp's fp64 flushes (every 512 terms) and a ragged tail,
// against the analytic fp64 softmax; also with the baseline (non-AVX2) build.
TEST(CrossEntropyCpu, LargeVocabularyMatchesAnalyticFp64) {
  const int64_t n = 3, V = 1500;
  const float scale = 0.5f;
  for (bool baseline : {false, true}) {
    SCOPED_TRACE(baseline ? "baseline" : "avx2 if available");
    cpu::force_baseline_simd(baseline);
    HostTensor logits = test::random_f32({n, V}, 7, -20.f, 20.f), losses = test::f32({n});
    const auto tgt = std::vector<int32_t>{5, 1499, 0};
    HostTensor targets = to_i32(tgt);
    const auto ld = logits.to_double();
    test::poison(losses);
    cross_entropy(logits, targets, losses, scale, true);
    cpu::force_baseline_simd(false);
    std::vector<double> grad(ld.size());
    for (int64_t r = 0; r < n; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < V; ++c) mx = std::max(mx, ld[size_t(r * V + c)]);
      for (int64_t c = 0; c < V; ++c) s += std::exp(ld[size_t(r * V + c)] - mx);
      for (int64_t c = 0; c < V; ++c)
        grad[size_t(r * V + c)] = scale * (std::exp(ld[size_t(r * V + c)] - mx) / s - (c == tgt[size_t(r)]));
    }
    EXPECT_LT(test::rel_err(losses, ce_ref(ld, tgt, V)), 1e-6);
    EXPECT_LT(test::rel_err(logits, grad), 1e-5);
  }
}

TEST(CrossEntropyCpu, RefusesTargetsOutsideTheVocabulary) {
  HostTensor logits = test::random_f32({2, 4}, 1), targets = test::i32({2}), losses = test::f32({2});
  targets.i()[1] = 4;
  EXPECT_THROW(cross_entropy(logits, targets, losses, 1.f, true), Error);
  targets.i()[1] = -2;
  EXPECT_THROW(cross_entropy(logits, targets, losses, 1.f, true), Error);
}

// Unchunked fp64: losses, dx = scale*(softmax-onehot) @ w, dw = dw0 + (scale*(softmax-onehot))^T @ x.
TEST(LmHeadLoss, ChunkedEqualsUnchunked) {
  const int64_t N = 29, C = 16, V = 41;
  const float scale = 1.f / 27.f;
  HostTensor x = test::random_f32({N, C}, 1), w = test::random_f32({V, C}, 2);
  const auto tgt = targets_with_ignores(N, V, 3);
  HostTensor targets = to_i32(tgt);
  const auto xd = x.to_double(), wd = w.to_double();
  std::vector<double> logits(size_t(N * V));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += xd[size_t(n * C + c)] * wd[size_t(v * C + c)];
      logits[size_t(n * V + v)] = s;
    }
  const auto loss_ref = ce_ref(logits, tgt, V);
  std::vector<double> dlogits(size_t(N * V), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (tgt[size_t(n)] < 0) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[size_t(n * V + v)]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[size_t(n * V + v)] - mx);
    for (int64_t v = 0; v < V; ++v)
      dlogits[size_t(n * V + v)] = scale * (std::exp(logits[size_t(n * V + v)] - mx) / s - (v == tgt[size_t(n)]));
  }
  std::vector<double> dx_ref(size_t(N * C), 0.0), dw_delta(size_t(V * C), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) {
        dx_ref[size_t(n * C + c)] += dlogits[size_t(n * V + v)] * wd[size_t(v * C + c)];
        dw_delta[size_t(v * C + c)] += dlogits[size_t(n * V + v)] * xd[size_t(n * C + c)];
      }

  for (int64_t chunk : {1, 4, 7, 29, 64}) {
    SCOPED_TRACE("chunk=" + std::to_string(chunk));
    HostTensor scratch = test::f32({chunk, V}), losses = test::f32({N}), dx = test::f32({N, C});
    HostTensor dw = test::random_f32({V, C}, 9);
    const auto dw0 = dw.to_double();
    test::poison(scratch);
    test::poison(losses);
    test::poison(dx);
    lm_head_loss(x, w, targets, losses, scratch, dx, dw, scale);
    EXPECT_LT(test::rel_err(losses, loss_ref), 1e-5);
    EXPECT_LT(test::rel_err(dx, dx_ref), 1e-5);
    EXPECT_LT(test::rel_err(test::minus(dw, dw0), dw_delta), 1e-5);

    // Loss only (evaluation): no gradients requested.
    test::poison(losses);
    lm_head_loss(x, w, targets, losses, scratch, Tensor{}, Tensor{}, scale);
    EXPECT_LT(test::rel_err(losses, loss_ref), 1e-5);
  }
}

}  // namespace
}  // namespace rt
