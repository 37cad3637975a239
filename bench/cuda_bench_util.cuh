// Shared by the CUDA kernel benchmarks (bench/attention.cu, bench/ring_steps.cu, bench/doc_ring_steps.cu): random
// bf16 inputs drawn on the device, event timing on the compute stream, a scoped device allocation, and the
// buffers of a ring-step benchmark with their row views.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "parallel/schedule/ring_schedule.h"

namespace rt::bench {

__global__ void random_bf16_kernel(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = (uint64_t(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
    z ^= z >> 29;
    const float u = float(z >> 40) * (1.f / 16777216.f);
    x[i] = __float2bfloat16((u * 2.f - 1.f) * 1.7f);  // roughly unit variance
  }
}

// Fills a bf16 tensor with hashed uniform values (variance ~1) from `seed`.
inline void random_bf16(const Tensor& t, uint64_t seed) {
  random_bf16_kernel<<<1024, 256, 0, cuda::current_stream()>>>(t.ptr<__nv_bfloat16>(), t.numel(), seed);
  CUDA_CHECK_LAUNCH();
}

// Median milliseconds of fn over reps timed runs after warmup runs (CUDA events on the compute stream). With
// sustain_ms > 0, fn first runs back to back (synchronized each time) for that long, so that the timed runs see
// the clock of sustained load: an H200 at its 700 W cap runs below the clock of a short burst. With a setup, each
// run (warmup ones too) follows an untimed setup() on the same stream.
inline double time_ms(const std::function<void()>& fn, int warmup, int reps, double sustain_ms = 0.0,
                      const std::function<void()>& setup = {}) {
  for (int i = 0; i < warmup; ++i) {
    if (setup) setup();
    fn();
  }
  if (sustain_ms > 0) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < sustain_ms) {
      fn();
      CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    if (setup) setup();
    CUDA_CHECK(cudaEventRecord(a, cuda::current_stream()));
    fn();
    CUDA_CHECK(cudaEventRecord(b, cuda::current_stream()));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Mean milliseconds per call of fn over reps calls issued back to back, with the host ahead of the GPU and the GPU
// under sustained load: after one untimed call (its time d), about 10 ms of calls (at least warmup) are queued
// without waiting, then one pair of CUDA events brackets the reps timed calls, which the host enqueues while the
// GPU still runs the queued ones. This is the GPU's time per call as a training step sees it: its host enqueues the
// next calls while the GPU runs, at the clock of a GPU kept busy. time_ms times each call alone on an idle GPU,
// which also counts the host's time to enqueue the call's launches (argument checks, the document summaries'
// set-up, tensor maps: tens of microseconds) and runs at the clock of a short burst (bench/NOTES.md "Host gaps in
// the per-call timings").
inline double time_queued_ms(const std::function<void()>& fn, int warmup, int reps) {
  cudaStream_t st = cuda::current_stream();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventRecord(a, st));
  fn();
  CUDA_CHECK(cudaEventRecord(b, st));
  CUDA_CHECK(cudaEventSynchronize(b));
  float once = 0;
  CUDA_CHECK(cudaEventElapsedTime(&once, a, b));
  const int ahead = std::max(warmup, std::min(2000, int(10.0 / std::max(double(once), 1e-3)) + 1));
  for (int i = 0; i < ahead; ++i) fn();
  CUDA_CHECK(cudaEventRecord(a, st));
  for (int i = 0; i < reps; ++i) fn();
  CUDA_CHECK(cudaEventRecord(b, st));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return double(ms) / reps;
}

// How the multi-rank benchmarks time each call (their --timing): queued (time_queued_ms, the default) or lone
// (time_ms: each call alone on an idle GPU, host enqueue included, the method before 2026-12-02's third session).
enum class CallTiming { queued, lone };
inline bool parse_call_timing(const std::string& s, CallTiming& t) {
  if (s == "queued") t = CallTiming::queued;
  else if (s == "lone") t = CallTiming::lone;
  else return false;
  return true;
}
inline const char* call_timing_name(CallTiming t) { return t == CallTiming::queued ? "queued" : "lone"; }
inline double call_ms(CallTiming t, const std::function<void()>& fn, int warmup, int reps) {
  return t == CallTiming::queued ? time_queued_ms(fn, warmup, reps) : time_ms(fn, warmup, reps);
}

// The time of fn run right after setup(): queued, the queued time of (setup, fn) pairs less that of setup alone;
// lone, the median of reps runs of fn each timed alone after an untimed setup() (warmup pairs first).
inline double call_after_ms(CallTiming t, const std::function<void()>& setup, const std::function<void()>& fn,
                            int warmup, int reps) {
  if (t == CallTiming::queued) {
    const double both = time_queued_ms([&] { setup(), fn(); }, warmup, reps);
    return std::max(0.0, both - time_queued_ms(setup, warmup, reps));
  }
  return time_ms(fn, warmup, reps, 0.0, setup);
}

struct DeviceBuffer {  // one device allocation on GPU 0, freed on scope exit
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { p = device_alloc(Device::cuda(0), bytes); }
  ~DeviceBuffer() { device_free(Device::cuda(0), p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Every buffer of a ring-step benchmark over one sample of N tokens (B = 1), H query heads and Hkv K/V heads (GQA
// when Hkv < H; Hkv divides H), with q, k, v and dout drawn at random (seeds 11-14), and tensor views of token rows
// [first, first + rows) of them.
struct RingStepBuffers {
  const int64_t N, H, D, Hkv;
  DeviceBuffer q, dout, out;     // (1, N, H, D) bf16 each
  DeviceBuffer k, v;             // (1, N, Hkv, D) bf16 each
  DeviceBuffer acc, dq;          // (1, N, H, D) f32 each (acc: the forward's resumable state, (1, H, N, D))
  DeviceBuffer dk, dv;           // (1, N, Hkv, D) f32 each
  DeviceBuffer m, l, lse, delta;  // (1, H, N) f32 each
  RingStepBuffers(int64_t n, int64_t h, int64_t d, int64_t hkv = 0)
      : N(n), H(h), D(d), Hkv(hkv > 0 ? hkv : h),
        q(bytes(H, 2)), dout(bytes(H, 2)), out(bytes(H, 2)), k(bytes(Hkv, 2)), v(bytes(Hkv, 2)),
        acc(bytes(H, 4)), dq(bytes(H, 4)), dk(bytes(Hkv, 4)), dv(bytes(Hkv, 4)),
        m(size_t(N * H) * 4), l(size_t(N * H) * 4), lse(size_t(N * H) * 4), delta(size_t(N * H) * 4) {
    RT_CHECK(Hkv >= 1 && H % Hkv == 0, "RingStepBuffers: " << Hkv << " K/V heads must divide " << H
                                                           << " query heads (GQA)");
    random_bf16(bf(q, N, 0), 11);
    random_bf16(kv(k, N, 0), 12);
    random_bf16(kv(v, N, 0), 13);
    random_bf16(bf(dout, N, 0), 14);
  }
  Tensor bf(const DeviceBuffer& d, int64_t rows, int64_t first) const {  // (1, rows, H, D) bf16
    return Tensor(static_cast<char*>(d.p) + size_t(first * H * D) * 2, DType::bf16, Device::cuda(0), {1, rows, H, D});
  }
  Tensor f32(const DeviceBuffer& d, int64_t rows, int64_t first) const {  // (1, rows, H, D) f32
    return Tensor(static_cast<char*>(d.p) + size_t(first * H * D) * 4, DType::f32, Device::cuda(0), {1, rows, H, D});
  }
  Tensor kv(const DeviceBuffer& d, int64_t rows, int64_t first) const {  // (1, rows, Hkv, D) bf16: k, v
    return Tensor(static_cast<char*>(d.p) + size_t(first * Hkv * D) * 2, DType::bf16, Device::cuda(0),
                  {1, rows, Hkv, D});
  }
  Tensor dkv(const DeviceBuffer& d, int64_t rows, int64_t first) const {  // (1, rows, Hkv, D) f32: dk, dv
    return Tensor(static_cast<char*>(d.p) + size_t(first * Hkv * D) * 4, DType::f32, Device::cuda(0),
                  {1, rows, Hkv, D});
  }
  Tensor rows(const DeviceBuffer& d, int64_t rows, int64_t first) const {  // (1, H, rows) f32: rank blocks of H*n
    return Tensor(static_cast<char*>(d.p) + size_t(first * H) * 4, DType::f32, Device::cuda(0), {1, H, rows});
  }
  Tensor acc_rows(int64_t rows, int64_t first) const {  // (1, H, rows, D) f32
    return Tensor(static_cast<char*>(acc.p) + size_t(first * H * D) * 4, DType::f32, Device::cuda(0), {1, H, rows, D});
  }

  // One whole-sample call each way, as a single-GPU run makes them (attn_fwd_whole; attn_bwd_delta, dQ zeroed and
  // attn_bwd_block_fresh, which stores dK / dV).
  void whole_fwd(const AttnMask& mask) {
    AttnState whole{acc_rows(N, 0), rows(m, N, 0), rows(l, N, 0)};
    attn_fwd_whole(bf(q, N, 0), kv(k, N, 0), kv(v, N, 0), whole, mask, bf(out, N, 0), rows(lse, N, 0));
  }
  void whole_bwd(const AttnMask& mask) {
    attn_bwd_delta(bf(out, N, 0), bf(dout, N, 0), rows(delta, N, 0));
    fill(f32(dq, N, 0), 0.f);
    attn_bwd_block_fresh(bf(q, N, 0), kv(k, N, 0), kv(v, N, 0), bf(dout, N, 0), rows(lse, N, 0), rows(delta, N, 0),
                         f32(dq, N, 0), dkv(dk, N, 0), dkv(dv, N, 0), mask);
  }

  // The ring's block calls: rank r's tokens are rows [r*n, (r+1)*n) of every buffer. One call of rank r with the
  // K/V block of source s, forward into the rank's state, backward into its dQ and the source's dK / dV.
  AttnState rank_state(int r, int64_t n) const { return AttnState{acc_rows(n, r * n), rows(m, n, r * n), rows(l, n, r * n)}; }
  void fwd_step(int r, int s, int64_t n, AttnState& st, const AttnMask& mask) {
    attn_fwd_block(bf(q, n, r * n), kv(k, n, s * n), kv(v, n, s * n), st, mask);
  }
  void bwd_step(int r, int s, int64_t n, const AttnMask& mask) {
    attn_bwd_block(bf(q, n, r * n), kv(k, n, s * n), kv(v, n, s * n), bf(dout, n, r * n), rows(lse, n, r * n),
                   rows(delta, n, r * n), f32(dq, n, r * n), dkv(dk, n, s * n), dkv(dv, n, s * n), mask);
  }
  // Every call of a cp-rank ring, rank after rank, in ring order (ring_source); mask_of(r, s, &mask) fills the mask
  // of rank r against source s and returns false where the call is skipped.
  using StepMask = std::function<bool(int r, int s, AttnMask* mask)>;
  // The forward as RingAttention runs it: the first computing step starts the state (attn_fwd_block_first), the
  // last finalizes it (attn_fwd_block_last), a lone step is attn_fwd_whole; with fused_ends false, attn_state_reset + attn_fwd_block steps +
  // attn_fwd_finalize (the form before the fused ends, for comparison).
  void ring_fwd(int cp, int64_t n, const StepMask& mask_of, bool fused_ends = true) {
    for (int r = 0; r < cp; ++r) {
      AttnState st = rank_state(r, n);
      std::vector<std::pair<int, AttnMask>> steps;  // (source, mask) of the steps that compute
      for (int t = 0; t < cp; ++t) {
        AttnMask mask;
        const int s = ring_source(r, t, cp);
        if (mask_of(r, s, &mask)) steps.emplace_back(s, mask);
      }
      Tensor o = bf(out, n, r * n), lse_r = rows(lse, n, r * n);
      if (!fused_ends || steps.empty()) {
        attn_state_reset(st);
        for (auto& [s, mask] : steps) fwd_step(r, s, n, st, mask);
        attn_fwd_finalize(st, o, lse_r);
        continue;
      }
      for (size_t i = 0; i < steps.size(); ++i) {
        const int s = steps[i].first;
        const Tensor qr = bf(q, n, r * n), ks = kv(k, n, s * n), vs = kv(v, n, s * n);
        if (steps.size() == 1) attn_fwd_whole(qr, ks, vs, st, steps[i].second, o, lse_r);
        else if (i == 0) attn_fwd_block_first(qr, ks, vs, st, steps[i].second);
        else if (i + 1 == steps.size()) attn_fwd_block_last(qr, ks, vs, st, steps[i].second, o, lse_r);
        else attn_fwd_block(qr, ks, vs, st, steps[i].second);
      }
    }
  }
  void ring_bwd(int cp, int64_t n, const StepMask& mask_of) {
    fill(dkv(dk, N, 0), 0.f);
    fill(dkv(dv, N, 0), 0.f);
    for (int r = 0; r < cp; ++r) {
      attn_bwd_delta(bf(out, n, r * n), bf(dout, n, r * n), rows(delta, n, r * n));
      fill(f32(dq, n, r * n), 0.f);
      for (int t = 0; t < cp; ++t) {
        AttnMask mask;
        const int s = ring_source(r, t, cp);
        if (mask_of(r, s, &mask)) bwd_step(r, s, n, mask);
      }
    }
  }

 private:
  size_t bytes(int64_t heads, int elem_bytes) const { return size_t(N * heads * D) * size_t(elem_bytes); }
};

}  // namespace rt::bench
