// bench_attn_decode: bandwidth of the split-KV decode kernel (attn_decode: out bf16 + lse, one launch),
// plus the device-to-device copy ceiling measured in the same process.
//   shapes (the issue's decode anchor): 32 query heads, 8 K/V heads, d 128, bf16; B 1 at KV lengths 32K, 64K, 128K,
//          512K, 1M, and B 8 at 128K. --only B:L[,B:L...] picks some of them (any B and L).
//   TB/s = bytes of K and V read per call (B x L x Hkv x D x 2 bytes x 2) / time, as the SDPA anchor counts them.
//   Timing: CUDA events, median of --reps (20) after --warmup (5); --sustain-ms runs the call back to back that long
//   first (the clock of sustained load). Each shape has its own cache, filled with random bf16 values.
//   --back-to-back N also times N calls queued back to back between two events (median of --reps, per call): the
//   host's launch latency is then hidden behind the previous call, so "ms" minus "b2b ms" is the part of a lone
//   call's time spent before its kernel starts.
// Output: a table on stdout and, with --json FILE, one JSON object per measurement (read by
// bench/decode_side_by_side.py).
#include <cuda_bf16.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attention.h"
#include "kernels/cuda_api.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"

namespace {

using rt::DType;
using rt::Tensor;
using rt::bench::DeviceBuffer;

constexpr int64_t kH = 32, kHkv = 8, kD = 128;

std::vector<std::pair<int64_t, int64_t>> default_shapes() {  // (B, L)
  return {{1, 32768}, {1, 65536}, {1, 131072}, {1, 524288}, {1, 1048576}, {8, 131072}};
}

// "1:32768,8:131072" -> {(1, 32768), (8, 131072)}; empty on a malformed list.
std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& spec) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t end = spec.find(',', pos) == std::string::npos ? spec.size() : spec.find(',', pos);
    const std::string item = spec.substr(pos, end - pos);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return {};
    try {
      const int64_t b = std::stoll(item.substr(0, colon)), l = std::stoll(item.substr(colon + 1));
      if (b <= 0 || l <= 0) return {};
      shapes.emplace_back(b, l);
    } catch (const std::exception&) {
      return {};
    }
    pos = end + 1;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  int warmup = 5, reps = 20, back_to_back = 0;
  std::string json_path;
  bool ceilings = true;
  double sustain_ms = 0;
  std::vector<std::pair<int64_t, int64_t>> shapes = default_shapes();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--json") json_path = next();
    else if (a == "--no-ceilings") ceilings = false;
    else if (a == "--sustain-ms") sustain_ms = std::stod(next());
    else if (a == "--back-to-back") back_to_back = std::stoi(next());
    else if (a == "--only") {
      const std::string spec = next();
      shapes = parse_shapes(spec);
      if (shapes.empty()) {
        std::fprintf(stderr, "bench_attn_decode: --only '%s': expected B:L pairs such as 1:32768,8:131072\n",
                     spec.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: bench_attn_decode [--warmup 5] [--reps 20] [--json FILE] [--only B:L,...] "
                           "[--no-ceilings] [--sustain-ms 0] [--back-to-back N]\n");
      return 2;
    }
  }
  if (reps < 1 || warmup < 0 || back_to_back < 0) {
    std::fprintf(stderr, "bench_attn_decode: --reps must be >= 1, --warmup and --back-to-back >= 0\n");
    return 2;
  }
  if (!rt::cuda_available()) {
    std::fprintf(stderr, "bench_attn_decode: no CUDA device\n");
    return 1;
  }
  try {
    rt::cuda::init(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
    FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    if (!json_path.empty() && json == nullptr) {
      std::fprintf(stderr, "bench_attn_decode: cannot write %s\n", json_path.c_str());
      return 1;
    }
    const rt::Device gpu = rt::Device::cuda(0);
    cudaStream_t stream = rt::cuda::current_stream();
    if (ceilings) {  // device-to-device copy: 2 GiB, bytes read + written
      const size_t bytes = size_t(2) << 30;
      DeviceBuffer src(bytes), dst(bytes);
      CUDA_CHECK(cudaMemsetAsync(src.p, 1, bytes, stream));
      const double ms = rt::bench::time_ms(
          [&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream)); }, warmup, reps);
      const double tbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e12;
      std::printf("ceiling: d2d copy %.2f TB/s (2 GiB, read+write)\n", tbps);
      if (json) std::fprintf(json, "{\"kind\":\"ceiling\",\"copy_tbps\":%.3f}\n", tbps);
    }
    std::printf("\n  B        L   H Hkv   d      ms   TB/s (K+V bytes / time)%s\n",
                back_to_back > 0 ? "  b2b ms  b2b TB/s" : "");
    for (const auto& [B, L] : shapes) {
      const size_t kv_bytes = size_t(B * L * kHkv * kD) * 2;  // one of K, V
      DeviceBuffer q(size_t(B * kH * kD) * 2), k(kv_bytes), v(kv_bytes), out(size_t(B * kH * kD) * 2);
      DeviceBuffer lse(size_t(B * kH) * 4);
      const int64_t work_elems = rt::attn_decode_work_elems(B, kH, kHkv, kD, L);
      DeviceBuffer work(size_t(work_elems) * 4);
      const Tensor tq(q.p, DType::bf16, gpu, {B, 1, kH, kD});    // (B,1,H,D)
      const Tensor tk(k.p, DType::bf16, gpu, {B, L, kHkv, kD});  // (B,L,Hkv,D)
      const Tensor tv(v.p, DType::bf16, gpu, {B, L, kHkv, kD});  // (B,L,Hkv,D)
      const Tensor tout(out.p, DType::bf16, gpu, {B, 1, kH, kD});
      const Tensor tlse(lse.p, DType::f32, gpu, {B, kH, 1});
      const Tensor twork(work.p, DType::f32, gpu, {work_elems});  // zeroed once: its arrival counters start at 0
      rt::fill(twork, 0.f);
      rt::bench::random_bf16(tq, 21);
      rt::bench::random_bf16(tk, 22);
      rt::bench::random_bf16(tv, 23);
      const double ms =
          rt::bench::time_ms([&] { rt::attn_decode(tq, tk, tv, Tensor{}, twork, tout, tlse); }, warmup, reps, sustain_ms);
      const double tbps = 2.0 * double(kv_bytes) / (ms * 1e-3) / 1e12;
      double b2b_ms = 0;
      if (back_to_back > 0)
        b2b_ms = rt::bench::time_ms(
                     [&] {
                       for (int i = 0; i < back_to_back; ++i) rt::attn_decode(tq, tk, tv, Tensor{}, twork, tout, tlse);
                     },
                     1, reps) /
                 back_to_back;
      std::printf("%3lld %8lld %3lld %3lld %3lld %7.4f %6.2f", (long long)B, (long long)L, (long long)kH,
                  (long long)kHkv, (long long)kD, ms, tbps);
      if (back_to_back > 0) std::printf("  %7.4f %6.2f", b2b_ms, 2.0 * double(kv_bytes) / (b2b_ms * 1e-3) / 1e12);
      std::printf("\n");
      std::fflush(stdout);
      if (json) {
        std::fprintf(json, "{\"kind\":\"decode\",\"B\":%lld,\"L\":%lld,\"H\":%lld,\"Hkv\":%lld,\"D\":%lld,\"ms\":%.5f,"
                           "\"tbps\":%.4f",
                     (long long)B, (long long)L, (long long)kH, (long long)kHkv, (long long)kD, ms, tbps);
        if (back_to_back > 0) std::fprintf(json, ",\"b2b_ms\":%.5f", b2b_ms);
        std::fprintf(json, "}\n");
      }
    }
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attn_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
