// bench_attention: TFLOP/s of the CUDA flash-attention kernels on the standard grid, plus the two device
// ceilings (device-to-device copy bandwidth, bf16 cuBLASLt matmul) measured in the same process.
//   grid: d in {64,128}, N in {1K,4K,16K,64K}, causal and not, bf16, model dim 2048 (H = 2048/d),
//         B*N = 32K tokens (B = 1 for N >= 32K).
//   FLOPs: forward 4*B*H*N^2*d (half when causal), backward 2.5x forward.
//   forward  = attn_fwd_whole (O bf16 and LSE from scratch: one fused kernel on an H100/H200), or with
//              --fwd-sequence attn_state_reset + attn_fwd_block + attn_fwd_finalize (what a ring step runs);
//   backward = attn_bwd_delta + zeroing dq (f32) + attn_bwd_block_fresh (dK / dV f32 overwritten: on an
//              H100/H200 the kernel stores them), or with --bwd-accumulate attn_bwd_delta + zeroing dq/dk/dv +
//              attn_bwd_block (what a ring step adding into a travelling accumulator would run).
//   Timing: CUDA events, median of --reps (10) after --warmup (3).
// Output: a table on stdout and, with --json FILE, one JSON object per measurement.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda_api.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "bench/cuda_bench_util.cuh"

namespace {

using rt::DType;
using rt::Tensor;
namespace bench = rt::bench;

using bench::DeviceBuffer;
using bench::random_bf16;
using bench::time_ms;
using Dev = DeviceBuffer;

}  // namespace

int main(int argc, char** argv) {
  int warmup = 3, reps = 10;
  std::string json_path, only_d, only_n;
  bool ceilings = true, fwd_sequence = false, bwd_accumulate = false;
  double sustain_ms = 0;  // > 0: each op runs back to back this long before it is timed (sustained-load clocks)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--json") json_path = next();
    else if (a == "--d") only_d = next();
    else if (a == "--n") only_n = next();
    else if (a == "--no-ceilings") ceilings = false;
    else if (a == "--fwd-sequence") fwd_sequence = true;
    else if (a == "--bwd-accumulate") bwd_accumulate = true;
    else if (a == "--deterministic") rt::set_deterministic_attention(true);
    else if (a == "--sustain-ms") sustain_ms = std::stod(next());
    else {
      std::fprintf(stderr, "usage: bench_attention [--warmup 3] [--reps 10] [--json FILE] [--d 128] [--n 4096] "
                           "[--no-ceilings] [--deterministic] [--fwd-sequence] [--bwd-accumulate] [--sustain-ms 0]\n");
      return 2;
    }
  }
  if (!rt::cuda_available()) {
    std::fprintf(stderr, "bench_attention: no CUDA device\n");
    return 1;
  }
  try {
    rt::cuda::init(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; backward dQ: %s\n", prop.name, prop.multiProcessorCount,
                rt::deterministic_attention() ? "deterministic (ordered adds)" : "float atomics");
    FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    const rt::Device gpu = rt::Device::cuda(0);

    if (ceilings) {
      // Device-to-device copy: 2 GiB, bytes read + written.
      const size_t bytes = size_t(2) << 30;
      Dev src(bytes), dst(bytes);
      CUDA_CHECK(cudaMemset(src.p, 1, bytes));
      const double copy_ms = time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, 0)); },
                                     warmup, reps);
      const double tbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e12;
      // bf16 matmul 8192^3 through rt::gemm (cuBLASLt), random data.
      const int64_t n = 8192;
      Dev a(size_t(n * n * 2)), b(size_t(n * n * 2)), c(size_t(n * n * 2));
      Tensor ta(a.p, DType::bf16, gpu, {n, n}), tb(b.p, DType::bf16, gpu, {n, n}), tc(c.p, DType::bf16, gpu, {n, n});
      random_bf16(ta, 1);
      random_bf16(tb, 2);
      const double mm_ms = time_ms([&] { rt::gemm(tc, ta, tb, false, true); }, warmup, reps);
      const double tflops = 2.0 * double(n) * n * n / (mm_ms * 1e-3) / 1e12;
      std::printf("ceilings: d2d copy %.2f TB/s (2 GiB, read+write); bf16 gemm 8192^3 (NT) %.0f TFLOP/s\n", tbps, tflops);
      if (json)
        std::fprintf(json, "{\"kind\":\"ceiling\",\"copy_tbps\":%.3f,\"gemm_bf16_tflops\":%.1f}\n", tbps, tflops);
    }

    // Buffers sized for the largest case: 64K tokens x model dim 2048.
    const int64_t max_tokens = 65536, model_dim = 2048;
    Dev q(size_t(max_tokens * model_dim * 2)), k(size_t(max_tokens * model_dim * 2)), v(size_t(max_tokens * model_dim * 2));
    Dev dout(size_t(max_tokens * model_dim * 2)), out(size_t(max_tokens * model_dim * 2));
    Dev acc(size_t(max_tokens * model_dim * 4)), dq(size_t(max_tokens * model_dim * 4)), dk(size_t(max_tokens * model_dim * 4)),
        dv(size_t(max_tokens * model_dim * 4));
    const int64_t max_rows = max_tokens * (model_dim / 64);
    Dev m(size_t(max_rows * 4)), l(size_t(max_rows * 4)), lse(size_t(max_rows * 4)), delta(size_t(max_rows * 4));

    std::printf("\n  d      N   B   H causal   fwd ms  fwd TF/s   bwd ms  bwd TF/s\n");
    for (int64_t d : {int64_t(64), int64_t(128)}) {
      if (!only_d.empty() && std::to_string(d) != only_d) continue;
      const int64_t H = model_dim / d;
      for (int64_t N : {int64_t(1024), int64_t(4096), int64_t(16384), int64_t(65536)}) {
        if (!only_n.empty() && std::to_string(N) != only_n) continue;
        const int64_t B = N >= 32768 ? 1 : 32768 / N;
        for (bool causal : {false, true}) {
          Tensor tq(q.p, DType::bf16, gpu, {B, N, H, d}), tk(k.p, DType::bf16, gpu, {B, N, H, d}),
              tv(v.p, DType::bf16, gpu, {B, N, H, d}), tdo(dout.p, DType::bf16, gpu, {B, N, H, d}),
              tout(out.p, DType::bf16, gpu, {B, N, H, d});
          Tensor tacc(acc.p, DType::f32, gpu, {B, H, N, d}), tm(m.p, DType::f32, gpu, {B, H, N}),
              tl(l.p, DType::f32, gpu, {B, H, N}), tlse(lse.p, DType::f32, gpu, {B, H, N}),
              tdelta(delta.p, DType::f32, gpu, {B, H, N});
          Tensor tdq(dq.p, DType::f32, gpu, {B, N, H, d}), tdk(dk.p, DType::f32, gpu, {B, N, H, d}),
              tdv(dv.p, DType::f32, gpu, {B, N, H, d});
          random_bf16(tq, 11); random_bf16(tk, 12); random_bf16(tv, 13); random_bf16(tdo, 14);
          rt::AttnState st{tacc, tm, tl};
          rt::AttnMask mask;
          mask.causal = causal;
          auto fwd = [&] {
            if (fwd_sequence) {
              rt::attn_state_reset(st);
              rt::attn_fwd_block(tq, tk, tv, st, mask);
              rt::attn_fwd_finalize(st, tout, tlse);
            } else {
              rt::attn_fwd_whole(tq, tk, tv, st, mask, tout, tlse);
            }
          };
          auto bwd = [&] {
            rt::attn_bwd_delta(tout, tdo, tdelta);
            rt::fill(tdq, 0.f);
            if (bwd_accumulate) {
              rt::fill(tdk, 0.f);
              rt::fill(tdv, 0.f);
              rt::attn_bwd_block(tq, tk, tv, tdo, tlse, tdelta, tdq, tdk, tdv, mask);
            } else {
              rt::attn_bwd_block_fresh(tq, tk, tv, tdo, tlse, tdelta, tdq, tdk, tdv, mask);
            }
          };
          const double fwd_ms = time_ms(fwd, warmup, reps, sustain_ms);
          fwd();
          const double bwd_ms = time_ms(bwd, warmup, reps, sustain_ms);
          const double flops = 4.0 * double(B) * H * double(N) * double(N) * d * (causal ? 0.5 : 1.0);
          const double fwd_tf = flops / (fwd_ms * 1e-3) / 1e12, bwd_tf = 2.5 * flops / (bwd_ms * 1e-3) / 1e12;
          std::printf("%3ld %6ld %3ld %3ld %6s %8.3f %9.1f %8.3f %9.1f\n", long(d), long(N), long(B), long(H),
                      causal ? "yes" : "no", fwd_ms, fwd_tf, bwd_ms, bwd_tf);
          std::fflush(stdout);
          if (json)
            std::fprintf(json,
                         "{\"kind\":\"attention\",\"backend\":\"ringtrain\",\"d\":%ld,\"N\":%ld,\"B\":%ld,\"H\":%ld,"
                         "\"causal\":%s,\"deterministic\":%s,\"fwd_ms\":%.4f,\"fwd_tflops\":%.2f,\"bwd_ms\":%.4f,"
                         "\"bwd_tflops\":%.2f}\n",
                         long(d), long(N), long(B), long(H), causal ? "true" : "false",
                         rt::deterministic_attention() ? "true" : "false", fwd_ms, fwd_tf, bwd_ms, bwd_tf);
        }
      }
    }
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
